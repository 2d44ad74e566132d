"""Gather what the reconcile decision needs: GPUs and their processes from the driver, which replica
each GPU process belongs to (by session, as every replica leads its own), MPS daemon health."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.apply.diff import HostObservation
from gpuplex.core.apply.model import GpuProcessStatus, GpuStatus, MpsDaemonRecord, WorkloadRecord
from gpuplex.host.driver import GpuDriver
from gpuplex.host.mps import MpsControl
from gpuplex.host.proc import session_of


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    gpus: list[GpuStatus]
    processes: list[GpuProcessStatus]
    owner_of_pid: dict[int, str]  # GPU process pid -> replica label

    def memory_by_label(self) -> dict[str, int]:
        used: dict[str, int] = {}
        for process in self.processes:
            label = self.owner_of_pid.get(process.pid)
            if label is not None:
                used[label] = used.get(label, 0) + process.used_memory_mib
        return used

    def device_users(self) -> dict[str, list[str]]:
        users: dict[str, list[str]] = {}
        for process in self.processes:
            who = self.owner_of_pid.get(process.pid, f"pid {process.pid} (not gpuplex's)")
            users.setdefault(process.device_uuid, [])
            if who not in users[process.device_uuid]:
                users[process.device_uuid].append(who)
        return users


def snapshot(driver: GpuDriver, records: list[WorkloadRecord]) -> GpuSnapshot:
    sessions = {r.pid: r.label for r in records if r.pid is not None}
    processes = driver.processes()
    owners = {}
    for process in processes:
        session = session_of(process.pid)
        if session in sessions:
            owners[process.pid] = sessions[session]
    return GpuSnapshot(gpus=driver.gpus(), processes=processes, owner_of_pid=owners)


def observation(
    gpu: GpuSnapshot,
    records: list[WorkloadRecord],
    daemons: list[MpsDaemonRecord],
    mps: MpsControl,
    owned_mig: dict[int, list[str]],
    vram_tolerance_percent: int,
) -> HostObservation:
    return HostObservation(
        gpus=gpu.gpus,
        records=records,
        mps_daemons=daemons,
        mps_alive={d.gpu_index: mps.alive(d) for d in daemons},
        gpu_memory_by_label=gpu.memory_by_label(),
        device_users=gpu.device_users(),
        owned_mig=owned_mig,
        vram_tolerance_percent=vram_tolerance_percent,
    )
