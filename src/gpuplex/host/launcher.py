"""The process runtime: start a replica as a process in its own session and cgroup, with exactly its
GPU visible, its output in its own log files; stop it gracefully (SIGTERM, grace, SIGKILL) without
touching any other replica."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.apply.launch import process_argv
from gpuplex.core.apply.model import ExitStatus, WorkloadDesired, WorkloadRecord
from gpuplex.errors import HostActionError
from gpuplex.host.cgroups import Cgroups
from gpuplex.host.children import Children
from gpuplex.host.logs import log_paths
from gpuplex.host.proc import group_has_running_process, is_same_process, session_of, user_ids


@dataclass(frozen=True, slots=True)
class Started:
    pid: int
    start_ticks: int | None
    cgroups: list[str]
    limits_applied: str | None


class Launcher(Protocol):
    """Starts and stops replicas: processes (ProcessRuntime) or containers (ContainerRuntime)."""

    name: str

    def start(self, wanted: WorkloadDesired, env: dict[str, str]) -> Started: ...

    def exit_status(self, record: WorkloadRecord) -> ExitStatus | None: ...

    def ask_to_stop(self, record: WorkloadRecord) -> None:
        """Where the runtime can, SIGTERM now without waiting; `stop` then waits for the exit and
        does not signal again. Asking every replica first lets many drain at the same time
        instead of one after another."""
        ...

    def stop(self, record: WorkloadRecord, grace_s: float) -> None: ...

    def release(self, record: WorkloadRecord) -> None: ...


def unit_name(wanted: WorkloadDesired) -> str:
    return f"{wanted.workload}-{wanted.replica}"


class ProcessRuntime:
    name = "process"

    def __init__(self, children: Children, cgroups: Cgroups | None, logs_dir: Path) -> None:
        self.children = children
        self.cgroups = cgroups
        self.logs_dir = logs_dir
        self._asked: set[int] = set()  # pids sent SIGTERM by ask_to_stop, not yet stopped

    def start(self, wanted: WorkloadDesired, env: dict[str, str]) -> Started:
        dirs: list[Path] = []
        if self.cgroups is not None:
            dirs = self.cgroups.create(wanted.tenant, unit_name(wanted), wanted.limits)
        procs = [str(p) for p in self.cgroups.procs_files(dirs)] if self.cgroups else []
        run_as = None
        if wanted.unix_user is not None:
            run_as = user_ids(wanted.unix_user)
            if run_as is None:
                # Never fall back to gpuplex's own user: that would run the tenant as root.
                raise HostActionError(
                    f"unix_user {wanted.unix_user!r} of tenant {wanted.tenant} does not exist on "
                    f"this host: create it (useradd --system {wanted.unix_user}) or remove unix_user"
                )
        argv = process_argv(wanted, procs, run_as)
        stdout_path, stderr_path = log_paths(self.logs_dir, wanted.tenant, unit_name(wanted))
        with stdout_path.open("ab") as stdout, stderr_path.open("ab") as stderr:
            pid, ticks = self.children.spawn(argv, env=env, stdout=stdout, stderr=stderr)
        applied = self.cgroups.read_back(dirs).describe() if self.cgroups and dirs else None
        return Started(
            pid=pid, start_ticks=ticks, cgroups=[str(d) for d in dirs], limits_applied=applied
        )

    def exit_status(self, record: WorkloadRecord) -> ExitStatus | None:
        if record.pid is None:
            return ExitStatus(note="never started")
        return self.children.exit_status(record.pid, record.start_ticks)

    def ask_to_stop(self, record: WorkloadRecord) -> None:
        pid = record.pid
        if pid is not None and is_same_process(pid, record.start_ticks) and session_of(pid) == pid:
            _signal_group(pid, signal.SIGTERM)
            self._asked.add(pid)

    def stop(self, record: WorkloadRecord, grace_s: float) -> None:
        """SIGTERM to the replica's process group, SIGKILL after the grace period; then anything
        left in its cgroup (a process that left the group is still in the cgroup)."""
        pid = record.pid
        if pid is None:
            return
        if is_same_process(pid, record.start_ticks) and session_of(pid) == pid:
            if pid not in self._asked:  # a second SIGTERM would cut some servers' drain short
                _signal_group(pid, signal.SIGTERM)
            deadline = now_s() + grace_s
            while _group_alive(pid) and now_s() < deadline:
                self.children.exit_status(pid, record.start_ticks)  # reap the leader if it is ours
                sleep_s(0.05)
            _signal_group(pid, signal.SIGKILL)
        if self.cgroups is not None and record.cgroups:
            dirs = [Path(d) for d in record.cgroups]
            for leftover in self.cgroups.pids(dirs):
                _kill(leftover)
        self.children.wait(pid, 2.0)
        self.children.exit_status(pid, record.start_ticks)
        self._asked.discard(pid)

    def release(self, record: WorkloadRecord) -> None:
        """Remove the cgroups of a replica that is gone for good."""
        if self.cgroups is not None and record.cgroups:
            self.cgroups.remove([Path(d) for d in record.cgroups])


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return group_has_running_process(pgid)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
