"""A simulated process on several GPUs reports its memory on each of them, and the sampler records
it per GPU: the GPU map once showed a 2-GPU replica's 112 GiB on its first 80 GiB GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplex.core.apply.model import Binding, Phase, WorkloadDesired, WorkloadRecord
from gpuplex.core.plan import Mode
from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.host.sim_driver import SimulatedDriver
from gpuplex.host.state import HostState, StateDir
from gpuplex.sim.workload import SimulatedGpuMemory, spread
from gpuplex.up.sampler import take_samples
from tests.unit.core.meter.plans import T0


@pytest.mark.parametrize(
    ("mib", "devices", "shares"),
    [(114688, 2, [57344, 57344]), (10, 3, [4, 3, 3]), (0, 2, [0, 0]), (7, 1, [7])],
)
def test_memory_is_spread_evenly_and_adds_up(mib: int, devices: int, shares: list[int]) -> None:
    assert spread(mib, devices) == shares
    assert sum(spread(mib, devices)) == mib


def test_a_two_gpu_replica_is_sampled_on_both_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = NodeSpec.model_validate({"name": "n", "gpus": [{"model": "H100-80GB", "count": 2}]})
    driver = SimulatedDriver(tmp_path / "sim", node)
    gpu0, gpu1 = (g.uuid for g in driver.gpus())
    monkeypatch.setenv("GPUPLEX_SIM_DIR", str(tmp_path / "sim"))
    monkeypatch.setenv("GPUPLEX_DEVICE_UUIDS", f"{gpu0},{gpu1}")
    memory = SimulatedGpuMemory()
    memory.hold(114688)  # 70 % of a 160 GiB replica
    memory.busy_for(1.5)
    report = (tmp_path / "sim" / "memory" / str(os.getpid())).read_text()
    assert report == f"{gpu0} 57344 1.500\n{gpu1} 57344 1.500\n"

    dirs = StateDir(tmp_path / "host")
    dirs.root.mkdir()
    desired = WorkloadDesired(
        tenant="contoso",
        workload="llm",
        replica=0,
        binding=Binding(mode=Mode.DEDICATED, gpu_indices=[0, 1], memory_mib=163840),
        argv=["sim"],
    )
    # the sampler finds a replica's processes by the session its recorded pid leads
    record = WorkloadRecord(desired=desired, phase=Phase.RUNNING, pid=os.getsid(0))
    dirs.write_state(HostState(records=[record]))
    samples = take_samples(dirs, driver, "n", T0, "sim")
    assert [(s.gpu_index, s.memory_used_mib) for s in samples] == [(0, 57344), (1, 57344)]
    assert all(s.memory_used_mib <= 81920 for s in samples)
