"""Busy GPU time on one server, end to end with the simulated driver: a real simulated model server
reports the seconds it was busy serving, the simulated driver turns them into utilization, the
sampler stores samples with it, and the roll-ups meter busy GPU-seconds, so that `usage` and
`hybrid` statements charge measured GPU time (before, nothing sampled utilization on one server
and both charged none)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx2
import pytest

from gpuplex.core.apply.model import Binding, Phase, WorkloadDesired, WorkloadRecord
from gpuplex.core.meter import BUSY_GPU_SECONDS, MeterWindow
from gpuplex.core.plan import Mode
from gpuplex.host.sim_driver import SimulatedDriver, sim_gpu_uuid
from gpuplex.host.state import HostState, StateDir
from gpuplex.server.sample_intake import store_samples
from gpuplex.up.sampler import take_samples
from tests.integration.server.conftest import SPEC_YAML, T0, TENANT_A, Api
from tests.integration.sim.servers import free_port, wait_healthy

NODE = "node-one"
PERIOD = f"{T0:%Y-%m}"
PRICED_SPEC = SPEC_YAML.replace('gpu_hour: {H100-80GB: "3.60"}', 'gpu_hour: {H100-80GB: "360"}')


@pytest.fixture
def driver(api: Api, tmp_path: Path) -> SimulatedDriver:
    applied = api.ctx.current.get()
    assert applied is not None
    return SimulatedDriver(tmp_path / "sim", applied.spec.fleet.nodes[0])


@pytest.fixture
def model_server(
    driver: SimulatedDriver, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """alphaco's simulated model server on GPU 0, in its own session as the host runtime starts
    it, reporting to the simulated driver."""
    port = free_port()
    env = os.environ | {
        "GPUPLEX_SIM_DIR": str(tmp_path / "sim"),
        "GPUPLEX_DEVICE_UUIDS": sim_gpu_uuid(NODE, 0),
    }
    argv = [sys.executable, "-m", "gpuplex.cli.sim", "model", "--port", str(port)]
    argv += ["--model", "alphaco-chat", "--gpu-memory-mib", "14336"]
    argv += ["--decode-ms-per-token", "25"]
    with (tmp_path / "model.log").open("wb") as log:
        process = subprocess.Popen(  # noqa: S603 - our own CLI
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_healthy(port, process)
        yield process, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def running(dirs: StateDir, pid: int) -> None:
    desired = WorkloadDesired(
        tenant=TENANT_A,
        workload="chat",
        replica=0,
        binding=Binding(mode=Mode.MPS, gpu_indices=[0], memory_mib=20480, thread_percent=50),
        argv=["sim"],
    )
    record = WorkloadRecord(desired=desired, phase=Phase.RUNNING, pid=pid)
    dirs.write_state(HostState(records=[record]))


def busy_line_amounts(api: Api) -> list[Decimal]:
    reply = api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}")
    assert reply.status_code == 200, reply.text
    return [
        Decimal(line["amount"])
        for line in reply.json()["lines"]
        if line["description"].startswith("GPU busy time")
    ]


def test_usage_and_hybrid_charge_the_busy_time_the_simulated_server_reports(
    api: Api,
    tmp_path: Path,
    driver: SimulatedDriver,
    model_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, url = model_server
    dirs = StateDir(tmp_path / "host")
    dirs.root.mkdir(parents=True)
    running(dirs, process.pid)

    def sample(after_s: int) -> float | None:
        samples = take_samples(dirs, driver, NODE, T0 + timedelta(seconds=after_s), "sim")
        assert store_samples(api.ctx, samples) == 1
        (taken,) = samples
        assert (taken.gpu_index, taken.memory_used_mib) == (0, 14336)
        return taken.utilization_percent

    time.sleep(1.2)  # the server reports its busy seconds every second
    assert sample(10) == 0.0  # the first reading: nothing to compare with yet
    with httpx2.Client(base_url=url, timeout=10) as client:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # one request after another: busy nearly all along
            body = {"model": "alphaco-chat", "prompt": "hi", "max_tokens": 8}
            assert client.post("/v1/completions", json=body).status_code == 200
    time.sleep(1.2)
    busy = sample(20)
    assert busy is not None
    assert 20 < busy <= 100
    time.sleep(1.2)
    idle = sample(80)
    assert idle is not None
    assert idle < busy / 2

    api.clock.advance(timedelta(minutes=5))
    api.ctx.metering.catch_up(api.clock.utc_now())
    lines = api.ctx.metering.lines(MeterWindow(T0, T0 + timedelta(hours=1)))
    busy_s = sum(
        (x.quantity for x in lines if x.tenant == TENANT_A and x.metric == BUSY_GPU_SECONDS),
        Decimal(0),
    )
    assert busy_s >= 60 * Decimal(repr(busy)) / 100  # the busy sample holds from +20 s to +80 s

    for method in ("usage", "hybrid"):
        api.apply(PRICED_SPEC.replace("pricing:\n", f"pricing:\n  method: {method}\n"))
        amounts = busy_line_amounts(api)
        assert amounts, method
        assert all(amount > 0 for amount in amounts), method
