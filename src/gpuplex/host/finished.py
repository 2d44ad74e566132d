"""How the runs of replicas that are never restarted (jobs) ended, kept in the host's state
(`HostState.finished`) until the control plane has taken note: when the run started and ended,
its exit status, and whether it ended by itself, was stopped by gpuplex, or was lost. The end time
of a run whose launching shell recorded its exit status is that file's modification time, so a
job that ended while gpuplex was down is not taken to have run until gpuplex came back.

Each run of a job also gets a header line in its stdout and stderr logs, written before its
process starts, so one attempt's output can be told from the next one's."""

from __future__ import annotations

import os
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path

from gpuplex.core.apply.model import ExitStatus, FinishedRun, WorkloadDesired, WorkloadRecord
from gpuplex.core.jobs.live import attempt_of
from gpuplex.core.spec.runtime import RestartPolicy
from gpuplex.host.logs import log_paths
from gpuplex.host.state import HostState


def never_restarted(wanted: WorkloadDesired) -> bool:
    return wanted.restart.policy is RestartPolicy.NEVER


def exit_file(logs_dir: Path, wanted: WorkloadDesired) -> Path:
    """Where the launching shell of a replica that is never restarted writes its exit status
    (core.apply.launch; the process runtime names it so)."""
    return logs_dir / wanted.tenant / f"{wanted.workload}-{wanted.replica}.exit"


def ended_at_s(logs_dir: Path, record: WorkloadRecord, now_s: float) -> float:
    """When the run's process ended: its exit file's time when its launching shell wrote one
    for this run, else `now_s` (when the host saw it gone)."""
    try:
        written = exit_file(logs_dir, record.desired).lstat().st_mtime
    except OSError:
        return now_s
    started = record.started_at_s if record.started_at_s is not None else 0.0
    return written if started <= written <= now_s else now_s


def finished_run(
    record: WorkloadRecord,
    ended: ExitStatus,
    ended_s: float,
    *,
    stopped_by: str | None = None,
    lost: bool = False,
) -> FinishedRun:
    """How the run of `record` ended: `ended` as the host learned it, at `ended_s`; `stopped_by`
    gpuplex's reason when it stopped it; `lost` when nothing recorded how it ended."""
    return FinishedRun(
        label=record.label,
        attempt=attempt_of(record.desired.env),
        started_at_s=record.started_at_s,
        ended_at_s=ended_s,
        exit_code=ended.shell_code(),
        note=ended.note,
        stopped_by=stopped_by,
        lost=lost,
    )


def status_unknown(ended: ExitStatus) -> bool:
    """Gone with neither an exit code nor a signal: a process gpuplex adopted after a restart,
    gone without an exit file."""
    return ended.code is None and ended.signal is None


def remember(state: HostState, run: FinishedRun) -> HostState:
    """`state` with `run` as the last finished run of its replica."""
    others = [f for f in state.finished if f.label != run.label]
    return state.model_copy(update={"finished": [*others, run]})


def forget(state: HostState, labels: Collection[str]) -> HostState:
    """`state` without the finished runs of `labels` (the control plane has them)."""
    if not labels:
        return state
    kept = [f for f in state.finished if f.label not in labels]
    return state.model_copy(update={"finished": kept})


def write_header(logs_dir: Path, wanted: WorkloadDesired, now_s: float) -> None:
    """A line at the head of this run's output in each of its log files (a job's attempt)."""
    attempt = attempt_of(wanted.env)
    if attempt is None:
        return
    at = datetime.fromtimestamp(now_s, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    line = f"----- gpuplex: {wanted.workload} attempt {attempt + 1} starts at {at} -----\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    for path in log_paths(logs_dir, wanted.tenant, f"{wanted.workload}-{wanted.replica}"):
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:
            continue  # a link where the log should be: the launch refuses it, with the reason
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
