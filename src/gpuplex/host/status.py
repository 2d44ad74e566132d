"""`gpuplex host status`: what this host runs, read from the state files and checked against /proc
and the GPU driver (a dead pid is reported as dead even if no supervisor has noticed yet)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gpuplex.clock import now_s
from gpuplex.core.apply.model import GpuStatus, Phase
from gpuplex.host.driver import GpuDriver
from gpuplex.host.observe import snapshot
from gpuplex.host.proc import is_same_process
from gpuplex.host.state import Event, StateDir


class _StatusModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaStatus(_StatusModel):
    label: str
    tenant: str
    workload: str
    phase: Phase
    alive: bool
    pid: int | None
    mode: str
    gpu: str
    device: str | None
    planned_memory_mib: int
    observed_memory_mib: int | None
    restarts: int
    uptime_s: float | None
    health_failures: int
    last_exit: str | None
    message: str | None
    cgroups: list[str]
    limits_applied: str | None
    stderr_log: str  # where its errors are, and for one that is gone, the last line there
    stderr_last_line: str | None = None


class MpsDaemonStatus(_StatusModel):
    gpu_index: int
    pid: int
    alive: bool
    restarts: int
    pipe_dir: str


class HostStatus(_StatusModel):
    node: str | None
    instance: str  # this state directory's name on the host: its cgroups are gpuplex/<instance>
    spec_path: str | None
    supervisor_pid: int | None
    driver: str
    gpus: list[GpuStatus]
    replicas: list[ReplicaStatus]
    mps_daemons: list[MpsDaemonStatus]
    recent_events: list[Event]


def host_status(dirs: StateDir, driver: GpuDriver, events: int = 10) -> HostStatus:
    desired = dirs.read_desired()
    state = dirs.read_state()
    gpu = snapshot(driver, state.records)
    memory = gpu.memory_by_label()
    now = now_s()
    replicas = []
    for record in sorted(state.records, key=lambda r: r.label):
        alive = record.pid is not None and is_same_process(record.pid, record.start_ticks)
        binding = record.desired.binding
        unit = f"{record.desired.workload}-{record.desired.replica}"
        stderr_log = dirs.logs / record.desired.tenant / f"{unit}.stderr.log"
        replicas.append(
            ReplicaStatus(
                label=record.label,
                tenant=record.desired.tenant,
                workload=record.desired.workload,
                phase=record.phase,
                alive=alive,
                pid=record.pid,
                mode=binding.mode.value,
                gpu=binding.describe(),
                device=record.device,
                planned_memory_mib=binding.memory_mib,
                observed_memory_mib=memory.get(record.label),
                restarts=record.restarts,
                uptime_s=now - record.started_at_s if alive and record.started_at_s else None,
                health_failures=record.health_failures,
                last_exit=record.last_exit,
                message=record.message,
                cgroups=record.cgroups,
                limits_applied=record.limits_applied,
                stderr_log=str(stderr_log),
                stderr_last_line=None if alive else _last_line(stderr_log),
            )
        )
    daemons = [
        MpsDaemonStatus(
            gpu_index=d.gpu_index,
            pid=d.pid,
            alive=is_same_process(d.pid, d.start_ticks),
            restarts=d.restarts,
            pipe_dir=d.pipe_dir,
        )
        for d in state.mps_daemons
    ]
    return HostStatus(
        node=desired.host.node if desired else None,
        instance=dirs.instance,
        spec_path=desired.spec_path if desired else None,
        supervisor_pid=dirs.lock_holder(),
        driver=driver.name,
        gpus=gpu.gpus,
        replicas=replicas,
        mps_daemons=daemons,
        recent_events=dirs.events(last=events),
    )


def _last_line(path: Path, tail_bytes: int = 4096) -> str | None:
    """The last non-empty line of a log file (from its last few KiB), or None."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, 2) - tail_bytes))
            lines = log.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1][:300] if lines else None
