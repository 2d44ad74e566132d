"""The simulated GPU driver: MIG under the catalog's rules, memory reports from files, lost GPUs,
state kept in files across instances."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.apply.model import GpuProcessStatus
from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.errors import GpuDriverError
from gpuplex.host.sim_driver import SimulatedDriver, sim_gpu_uuid, sim_mig_uuid
from tests.clocks import ManualClock

# H100-80GB profile ids
P7G, P4G, P3G, P2G, P1G, P1G_ME = 0, 5, 9, 14, 19, 20


def node(*groups: dict[str, Any]) -> NodeSpec:
    return NodeSpec.model_validate({"name": "sim-0", "gpus": list(groups)})


def h100s(
    tmp_path: Path, count: int = 2, mig: str = "on", clock: ManualClock | None = None
) -> SimulatedDriver:
    spec = node({"model": "H100-80GB", "count": count, "mig": mig})
    if clock is None:
        return SimulatedDriver(tmp_path, spec)
    return SimulatedDriver(tmp_path, spec, clock=clock)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait(timeout=10)
    return child.pid


@pytest.mark.parametrize(
    ("groups", "mig_on", "enabled"),
    [
        ([{"model": "H100-80GB", "count": 2, "mig": "on"}], None, [True, True]),
        ([{"model": "H100-80GB", "count": 2, "mig": "off"}], {0, 1}, [False, False]),
        ([{"model": "H100-80GB", "count": 3, "mig": "auto"}], None, [False, False, False]),
        ([{"model": "H100-80GB", "count": 3, "mig": "auto"}], {1}, [False, True, False]),
        ([{"model": "L4", "mig": "on"}], {0}, [False]),  # no MIG on the card
        (
            [{"model": "L4", "mig": "auto"}, {"model": "A100-40GB", "count": 2, "mig": "auto"}],
            {0, 2},
            [False, False, True],
        ),
    ],
)
def test_initial_mig_mode_follows_the_spec_and_the_first_plan(
    tmp_path: Path, groups: list[dict[str, Any]], mig_on: set[int] | None, enabled: list[bool]
) -> None:
    driver = SimulatedDriver(tmp_path, node(*groups), mig_on)
    gpus = driver.gpus()
    assert [g.index for g in gpus] == list(range(len(enabled)))
    assert [g.mig_enabled for g in gpus] == enabled
    assert all(not g.lost and g.instances == [] for g in gpus)


def test_gpu_uuids_come_from_the_spec_or_are_stable(tmp_path: Path) -> None:
    groups: list[dict[str, Any]] = [
        {"model": "L4", "count": 2, "uuids": ["GPU-a", "GPU-b"]},
        {"model": "L4"},
    ]
    driver = SimulatedDriver(tmp_path, node(*groups))
    assert [g.uuid for g in driver.gpus()] == ["GPU-a", "GPU-b", sim_gpu_uuid("sim-0", 2)]
    assert sim_gpu_uuid("sim-0", 2) != sim_gpu_uuid("sim-1", 2)
    assert driver.gpus()[0].memory_mib > 0


def test_create_at_valid_placements(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    big = driver.create_mig_instance(0, P3G, 4)
    small = driver.create_mig_instance(0, P2G, 0)
    tiny = driver.create_mig_instance(0, P1G, 2)
    assert (big.gi_id, big.profile, big.start_slot, big.size_slots) == (1, "3g.40gb", 4, 4)
    assert (small.gi_id, small.profile, small.size_slots) == (2, "2g.20gb", 2)
    assert tiny.profile == "1g.10gb"
    uuids = {big.device_uuid, small.device_uuid, tiny.device_uuid}
    assert len(uuids) == 3
    assert all(u.startswith("MIG-") for u in uuids)
    gpu0, gpu1 = driver.gpus()
    assert gpu0.instances == [big, small, tiny]
    assert gpu1.instances == []
    assert driver.possible_placements(0)[P3G] == [(0, 4), (4, 4)]


@pytest.mark.parametrize(
    ("existing", "profile_id", "start", "why"),
    [
        ([(P3G, 0)], P2G, 2, "2g.20gb@2 overlaps another instance"),
        ([(P7G, 0)], P1G, 7, "cannot start at slot 7"),
        ([], P3G, 2, "3g.40gb cannot start at slot 2 (valid: (0, 4))"),
        ([(P1G_ME, 0)], P1G_ME, 1, "more than 1 x 1g.10gb+me"),
        ([(P7G, 0)], P1G, 0, "8 compute slices used of 7"),
    ],
)
def test_refused_placements_say_why(
    tmp_path: Path, existing: list[tuple[int, int]], profile_id: int, start: int, why: str
) -> None:
    driver = h100s(tmp_path)
    for pid, at in existing:
        driver.create_mig_instance(0, pid, at)
    before = driver.gpus()
    with pytest.raises(GpuDriverError, match="insufficient resources") as raised:
        driver.create_mig_instance(0, profile_id, start)
    assert why in str(raised.value)
    assert driver.gpus() == before  # nothing half-made


def test_compute_slices_are_limited_to_seven(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    for start in range(7):
        driver.create_mig_instance(0, P1G, start)
    with pytest.raises(GpuDriverError, match="compute slices used of 7"):
        driver.create_mig_instance(0, P1G_ME, 0)


@pytest.mark.parametrize(
    ("gpu", "profile_id", "why"),
    [(1, P1G, "MIG mode is disabled"), (0, 99, "no MIG profile with id 99"), (5, P1G, "no GPU 5")],
)
def test_create_refuses_bad_requests(tmp_path: Path, gpu: int, profile_id: int, why: str) -> None:
    driver = SimulatedDriver(
        tmp_path,
        node({"model": "H100-80GB", "mig": "on"}, {"model": "H100-80GB", "mig": "off"}),
    )
    with pytest.raises(GpuDriverError, match=why):
        driver.create_mig_instance(gpu, profile_id, 0)


def test_destroy_frees_the_slots(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    whole = driver.create_mig_instance(0, P7G, 0)
    with pytest.raises(GpuDriverError):
        driver.create_mig_instance(0, P1G, 0)
    driver.destroy_mig_instance(0, whole.gi_id)
    assert driver.gpus()[0].instances == []
    again = driver.create_mig_instance(0, P1G, 0)
    assert again.gi_id == 2  # ids are not reused
    with pytest.raises(GpuDriverError, match="no GPU instance 1"):
        driver.destroy_mig_instance(0, whole.gi_id)


def test_destroy_refuses_an_instance_in_use(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    used = driver.create_mig_instance(0, P3G, 0)
    driver.report_memory(os.getpid(), used.device_uuid, 100)
    with pytest.raises(GpuDriverError, match=f"in use by pids \\[{os.getpid()}\\]"):
        driver.destroy_mig_instance(0, used.gi_id)
    assert driver.gpus()[0].instances == [used]
    driver.report_memory(dead_pid(), used.device_uuid, 100)
    (tmp_path / "memory" / str(os.getpid())).unlink()
    driver.destroy_mig_instance(0, used.gi_id)  # a dead process holds nothing
    assert driver.gpus()[0].instances == []


def test_state_persists_across_instances(tmp_path: Path) -> None:
    first = h100s(tmp_path)
    made = first.create_mig_instance(1, P4G, 0)
    first.lose_gpu(0)
    second = SimulatedDriver(tmp_path, None)
    assert second.gpus() == first.gpus()
    assert second.gpus()[1].instances == [made]
    assert second.gpus()[0].lost
    other_spec = SimulatedDriver(tmp_path, node({"model": "L4"}))  # the machine is already made
    assert other_spec.gpus() == first.gpus()
    assert second.create_mig_instance(1, P3G, 4).gi_id == 2


def test_opening_an_empty_directory_without_a_node_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(GpuDriverError, match="--driver sim"):
        SimulatedDriver(tmp_path / "empty", None)


def test_memory_reports_of_live_processes_only(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    gpu = driver.gpus()[0].uuid
    gone = dead_pid()
    driver.report_memory(os.getpid(), gpu, 2048)
    driver.report_memory(gone, gpu, 4096)
    (tmp_path / "memory" / "notes").write_text("not a report")
    assert driver.processes() == [
        GpuProcessStatus(device_uuid=gpu, pid=os.getpid(), used_memory_mib=2048)
    ]
    assert not (tmp_path / "memory" / str(gone)).exists()
    driver.report_memory(os.getpid(), gpu, 3000)  # a report is replaced, not appended
    assert [p.used_memory_mib for p in driver.processes()] == [3000]
    (tmp_path / "memory" / str(os.getpid())).write_text("half-writ")
    assert driver.processes() == []
    assert (tmp_path / "memory" / str(os.getpid())).exists()


def test_a_lost_gpu_is_reported_and_its_processes_vanish(tmp_path: Path) -> None:
    driver = h100s(tmp_path)
    gpu0, gpu1 = driver.gpus()
    mig = driver.create_mig_instance(0, P1G, 0)
    assert mig.device_uuid == sim_mig_uuid(gpu0.uuid, mig.gi_id)
    parent = os.getppid()
    driver.report_memory(os.getpid(), mig.device_uuid, 100)
    driver.report_memory(parent, gpu1.uuid, 200)
    driver.lose_gpu(0)
    assert [g.lost for g in driver.gpus()] == [True, False]
    assert [(p.pid, p.device_uuid) for p in driver.processes()] == [(parent, gpu1.uuid)]
    driver.lose_gpu(0, lost=False)
    assert not driver.gpus()[0].lost
    assert len(driver.processes()) == 2


def test_mig_mode_cannot_be_turned_off_under_instances(tmp_path: Path) -> None:
    driver = SimulatedDriver(
        tmp_path, node({"model": "H100-80GB", "mig": "off"}, {"model": "L4", "mig": "off"})
    )
    driver.set_mig_mode(0, True)
    made = driver.create_mig_instance(0, P3G, 0)
    with pytest.raises(GpuDriverError, match="GPU 0 still has MIG instances"):
        driver.set_mig_mode(0, False)
    assert driver.gpus()[0].mig_enabled
    driver.destroy_mig_instance(0, made.gi_id)
    driver.set_mig_mode(0, False)
    assert not driver.gpus()[0].mig_enabled
    with pytest.raises(GpuDriverError, match="L4 has no MIG"):
        driver.set_mig_mode(1, True)
    assert not driver.gpus()[1].mig_enabled
    driver.set_mig_mode(1, False)  # already off: fine


def test_a_model_the_spec_adds_gets_the_memory_the_plan_gives_it(tmp_path: Path) -> None:
    added = node({"model": "L40", "count": 2}, {"model": "H100-80GB", "count": 1, "mig": "off"})
    driver = SimulatedDriver(tmp_path, added, memory_mib={"L40": 49152})
    assert [g.memory_mib for g in driver.gpus()] == [49152, 49152, 81559]
    again = SimulatedDriver(tmp_path, None)  # a reader of the machine built above
    assert [g.memory_mib for g in again.gpus()] == [49152, 49152, 81559]


def write_report(tmp_path: Path, lines: list[str]) -> None:
    (tmp_path / "memory" / str(os.getpid())).write_text("".join(f"{line}\n" for line in lines))


def test_a_process_on_two_gpus_reports_memory_on_each(tmp_path: Path) -> None:
    driver = h100s(tmp_path, mig="off")
    gpu0, gpu1 = (g.uuid for g in driver.gpus())
    write_report(tmp_path, [f"{gpu0} 40000 0", f"{gpu1} 39000 0"])
    assert driver.processes() == [
        GpuProcessStatus(device_uuid=gpu0, pid=os.getpid(), used_memory_mib=40000),
        GpuProcessStatus(device_uuid=gpu1, pid=os.getpid(), used_memory_mib=39000),
    ]
    write_report(tmp_path, [f"{gpu0} 40000 0", "a broken line"])  # all of it, or nothing
    assert driver.processes() == []


def test_utilization_is_busy_seconds_over_elapsed_seconds(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    driver = h100s(tmp_path, mig="off", clock=clock)
    gpu0, gpu1 = (g.uuid for g in driver.gpus())
    pid = os.getpid()
    write_report(tmp_path, [f"{gpu0} 1000 5.0", f"{gpu1} 1000 5.0"])
    # the first reading has nothing to compare with: the devices are measured, the process idle
    assert driver.process_utilization() == {gpu0: {}, gpu1: {}}
    clock.reading_s = 110.0
    write_report(tmp_path, [f"{gpu0} 1000 7.5", f"{gpu1} 1000 7.5"])
    assert driver.process_utilization() == {gpu0: {pid: 25.0}, gpu1: {pid: 25.0}}
    clock.reading_s = 112.0
    write_report(tmp_path, [f"{gpu0} 1000 99.0", f"{gpu1} 1000 7.5"])  # never above 100 %
    assert driver.process_utilization() == {gpu0: {pid: 100.0}, gpu1: {pid: 0.0}}
    write_report(tmp_path, [f"{gpu0} 1000"])  # a report without busy seconds: idle
    clock.reading_s = 114.0
    assert driver.process_utilization() == {gpu0: {}, gpu1: {}}


def test_utilization_on_a_mig_device_is_its_share_of_the_gpu(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    driver = h100s(tmp_path, clock=clock)
    device = driver.create_mig_instance(0, P3G, 4).device_uuid
    write_report(tmp_path, [f"{device} 1000 0"])
    driver.process_utilization()
    clock.reading_s = 10.0
    write_report(tmp_path, [f"{device} 1000 10"])  # busy all the time: 3 of the 7 slices
    reading = driver.process_utilization()
    assert reading[device][os.getpid()] == pytest.approx(100 * 3 / 7)
    assert set(reading) == {device}  # GPU 1 is in MIG mode without instances: nothing runs there
    driver.lose_gpu(0)
    assert driver.process_utilization() == {}  # a lost GPU cannot be measured
