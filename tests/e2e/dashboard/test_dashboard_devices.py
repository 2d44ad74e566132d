"""Per-device memory on the GPU map, in a real chromium against a real control plane: a 2-GPU
replica's memory, sampled the way `gpuplex up` samples it (a simulated process reporting to the
simulated driver, the sampler, the server's sample intake), shows on both its GPUs, and no GPU
shows more used than it has, since a sample above capacity is refused on its way in. Before, the
replica's whole memory landed on its first GPU: `79.6 GiB planned · 112 GiB used` on 80 GiB."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuplex.clock import SYSTEM_CLOCK, utc_now
from gpuplex.core.apply.model import Binding, Phase, WorkloadDesired, WorkloadRecord
from gpuplex.core.meter import GpuSample
from gpuplex.core.plan import Mode
from gpuplex.host.sim_driver import SimulatedDriver
from gpuplex.host.state import HostState, StateDir
from gpuplex.server.context import ServerContext
from gpuplex.server.sample_intake import store_samples
from gpuplex.sim.workload import SimulatedGpuMemory
from gpuplex.store.db import open_store
from gpuplex.up.sampler import take_samples
from tests.e2e.dashboard.stack import Stack

pytest.importorskip("playwright", reason="the dashboard tests drive chromium with playwright")
from playwright.sync_api import Page

pytestmark = [pytest.mark.slow, pytest.mark.lane]

TENANT, WORKLOAD = "northwind", "chat-70b"  # the example's one replica on two GPUs
MEMORY_TEXT = re.compile(r"of ([\d.]+) GiB planned · ([\d.]+) GiB used")


@dataclass(frozen=True, slots=True)
class Sampled:
    gpu_indices: list[int]
    held_mib: int  # what the replica's process holds over both GPUs


@pytest.fixture(scope="module")
def sampled(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sampled]:
    workdir = tmp_path_factory.mktemp("sampler")
    engine = open_store(f"sqlite:///{stack.state_dir.parent / 'gpuplex.db'}")
    try:
        ctx = ServerContext.open(engine, SYSTEM_CLOCK)
        applied = ctx.current.get()
        assert applied is not None
        (placement,) = [
            p
            for p in applied.plan.placements
            if (p.tenant, p.workload, p.replica) == (TENANT, WORKLOAD, 0)
        ]
        assert len(placement.gpu_indices) == 2
        (node,) = [n for n in applied.spec.fleet.nodes if n.name == placement.node]
        driver = SimulatedDriver(workdir / "sim", node)
        uuids = {g.index: g.uuid for g in driver.gpus()}
        held_mib = int(placement.memory_mib * 0.7)
        with pytest.MonkeyPatch.context() as env:
            env.setenv("GPUPLEX_SIM_DIR", str(workdir / "sim"))
            env.setenv("GPUPLEX_DEVICE_UUIDS", ",".join(uuids[i] for i in placement.gpu_indices))
            SimulatedGpuMemory().hold(held_mib)
        dirs = StateDir(workdir / "host")
        dirs.root.mkdir()
        desired = WorkloadDesired(
            tenant=TENANT,
            workload=WORKLOAD,
            replica=0,
            binding=Binding(
                mode=Mode.DEDICATED,
                gpu_indices=placement.gpu_indices,
                memory_mib=placement.memory_mib,
            ),
            argv=["sim"],
        )
        # the sampler finds a replica's processes by the session its recorded pid leads
        record = WorkloadRecord(desired=desired, phase=Phase.RUNNING, pid=os.getsid(0))
        dirs.write_state(HostState(records=[record]))
        samples = take_samples(dirs, driver, placement.node, utc_now(), "sim")
        # a sampler's mistake at the same moment, on another GPU: refused, not drawn
        (other,) = [g for g in applied.plan.gpus if g.index not in placement.gpu_indices][:1]
        wrong = GpuSample(
            tenant=TENANT,
            workload=WORKLOAD,
            replica=0,
            node=placement.node,
            gpu_index=other.index,
            at=samples[0].at,
            memory_used_mib=other.memory_mib * 2,
            source="sim",
        )
        assert store_samples(ctx, [*samples, wrong]) == len(samples) == 2
        yield Sampled(placement.gpu_indices, held_mib)
    finally:
        engine.dispose()
        Path(workdir / "sim" / "memory" / str(os.getpid())).unlink(missing_ok=True)


def _memory_text(page: Page, gpu_index: int) -> tuple[float, float] | None:
    """(GiB the GPU has, GiB used on it) as its card says; None without a used figure."""
    card = page.locator(f"[data-testid=gpu][data-gpu-index='{gpu_index}']").first
    found = MEMORY_TEXT.search(card.locator(".gpu-memory").inner_text())
    return (float(found.group(1)), float(found.group(2))) if found else None


def test_a_two_gpu_replica_shows_memory_on_both_gpus_and_none_above_capacity(
    page: Page, stack: Stack, sampled: Sampled, page_errors: list[str]
) -> None:
    page.goto(f"/dashboard/#token={stack.admin_token}")
    page.wait_for_selector("[data-testid=gpu-slice]")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=gpu] .gpu-memory')]"
        ".some(e => e.textContent.includes('used'))"
    )
    per_gpu_gib = sampled.held_mib / 2 / 1024
    for index in sampled.gpu_indices:
        shown = _memory_text(page, index)
        assert shown is not None, f"GPU {index} shows no memory used"
        total_gib, used_gib = shown
        assert used_gib == pytest.approx(per_gpu_gib, abs=0.1)
        assert used_gib <= total_gib
        title = page.locator(
            f"[data-testid=gpu][data-gpu-index='{index}'] [data-testid=gpu-slice]"
            f"[data-tenant={TENANT}][data-workload={WORKLOAD}]"
        ).get_attribute("title")
        assert title is not None
        assert f"memory used {per_gpu_gib:.1f} GiB on this GPU" in title
    cards = page.locator("[data-testid=gpu]")
    for k in range(cards.count()):
        found = MEMORY_TEXT.search(cards.nth(k).locator(".gpu-memory").inner_text())
        if found:
            assert float(found.group(2)) <= float(found.group(1))  # never above capacity
    assert page_errors == []
