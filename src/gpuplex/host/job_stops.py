"""Stopping a job without holding up the host's pass: SIGTERM now and the record `stopping` with
the deadline of its grace period (`begin`); on each pass after, once its main process has exited or
the deadline has passed, SIGKILL to what is left of its group and its cgroup emptied, and how its
run ended (`finish`). The record goes once nothing of it runs. Several jobs stopped together so
drain at the same time, and the host's pass starts, stops and checks everything else meanwhile.

Only a job's process goes this way (a process replica never restarted): a spec replica keeps the
stop that waits within the pass (its drain is the operator's, and a spec change replaces replicas
one at a time), and a container is stopped by `docker stop`, which waits itself."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.apply.model import ExitStatus, Phase, WorkloadRecord
from gpuplex.core.spec.runtime import Runtime
from gpuplex.host.finished import never_restarted
from gpuplex.host.launcher import Launcher


def stops_in_passes(record: WorkloadRecord) -> bool:
    """Is `record` stopped over several passes (a job's process)?"""
    wanted = record.desired
    return never_restarted(wanted) and wanted.runtime is Runtime.PROCESS and record.pid is not None


def begin(
    launcher: Launcher, record: WorkloadRecord, reason: str, now_s: float, *, asked: bool
) -> WorkloadRecord:
    """SIGTERM now (unless it was `asked` already), and the record `stopping` until its grace
    period is over."""
    if not asked:
        launcher.ask_to_stop(record)
    grace = float(record.desired.restart.stop_grace_s)
    return record.model_copy(
        update={"phase": Phase.STOPPING, "stop_deadline_s": now_s + grace, "stop_reason": reason}
    )


@dataclass(frozen=True, slots=True)
class Stopped:
    """A stopping job that is over: how its main process ended, and the pids of it that could not
    be stopped (none: its record may go)."""

    ended: ExitStatus
    left: list[int]


def finish(launcher: Launcher, record: WorkloadRecord, now_s: float) -> Stopped | None:
    """None while the stopping `record` drains; once its main process has exited or its grace
    period is over, SIGKILL to what is left of it (its group, its cgroup) and how it ended."""
    ended = launcher.exit_status(record) if record.pid is not None else ExitStatus(note="gone")
    if ended is None and now_s < (record.stop_deadline_s or now_s):
        return None
    launcher.stop(record, 0.0)  # SIGKILL what is left of its group; empty its cgroup
    if ended is None:
        grace = record.desired.restart.stop_grace_s
        ended = ExitStatus(signal=9, note=f"SIGKILL after its grace period of {grace:g} s")
    return Stopped(ended, launcher.empty(record))
