"""The process runtime: start a replica as a process in its own session and cgroup, with exactly its
GPU visible, its output in its own log files; stop it gracefully (SIGTERM, grace, SIGKILL) without
touching any other replica."""

from __future__ import annotations

import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.apply.launch import process_argv
from gpuplex.core.apply.model import ExitStatus, WorkloadDesired, WorkloadRecord
from gpuplex.core.apply.users import is_default_user, replica_user, runs_as_root
from gpuplex.core.spec.runtime import RestartPolicy
from gpuplex.errors import HostActionError
from gpuplex.host.cgroups import Cgroups
from gpuplex.host.children import Children
from gpuplex.host.grants import ENTER, Reader, allows, granted_reads
from gpuplex.host.logs import log_paths
from gpuplex.host.proc import (
    group_has_running_process,
    is_same_process,
    pid_list,
    session_of,
    user_ids,
)
from gpuplex.host.tenant_users import ensure_user, private_directory


@dataclass(frozen=True, slots=True)
class TenantUser:
    """The unprivileged user a replica runs as, and its private writable directory."""

    name: str
    uid: int
    gid: int
    home: Path


class UserChooser:
    """Who a replica runs as: when gpuplex runs as root, never root unless the spec opts in
    (`unix_user: root`); each tenant its own system user, made on first use (core/apply/users.py).
    When gpuplex is not root it cannot switch users: replicas run as gpuplex's own user."""

    def __init__(self, instance: str, homes: Path, *, as_root: bool | None = None) -> None:
        self.instance = instance
        self.homes = homes
        self.as_root = os.geteuid() == 0 if as_root is None else as_root

    def user_of(self, wanted: WorkloadDesired) -> TenantUser | None:
        """None: run as gpuplex's own user (root only by the explicit opt-in)."""
        if not self.as_root:
            if wanted.unix_user is not None and not runs_as_root(wanted):
                raise HostActionError(
                    f"{wanted.label}: unix_user {wanted.unix_user!r} needs the host runtime to "
                    "run as root (it cannot switch users otherwise)"
                )
            return None
        if runs_as_root(wanted):
            return None
        name = replica_user(wanted, self.instance)
        if is_default_user(name, self.instance):
            ids = ensure_user(name)
        else:
            found = user_ids(name)
            if found is None:
                # Never fall back to gpuplex's own user: that would run the tenant as root.
                raise HostActionError(
                    f"unix_user {name!r} of tenant {wanted.tenant} does not exist on this host: "
                    f"create it (useradd --system {name}) or remove unix_user"
                )
            ids = found
        home = private_directory(self.homes, wanted.tenant, *ids)
        return TenantUser(name, ids[0], ids[1], home)


@dataclass(frozen=True, slots=True)
class Swept:
    """What a sweep of leftover processes did: the replicas it stopped processes of (with their
    pids), and the pids it could not stop."""

    stopped: dict[str, list[int]]
    left: dict[str, list[int]]


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

    def empty(self, record: WorkloadRecord) -> list[int]:
        """Stop every process left of a replica whose main process has ended (what it forked
        and detached); returns the pids that could not be stopped."""
        ...

    def sweep(self) -> Swept:
        """Stop and remove whatever of this gpuplex instance still runs on the host, recorded or
        not (`down`)."""
        ...


def unit_name(wanted: WorkloadDesired) -> str:
    return f"{wanted.workload}-{wanted.replica}"


class ProcessRuntime:
    name = "process"

    def __init__(
        self, children: Children, cgroups: Cgroups | None, logs_dir: Path, users: UserChooser
    ) -> None:
        self.children = children
        self.cgroups = cgroups
        self.logs_dir = logs_dir
        self.users = users
        self._asked: set[int] = set()  # pids sent SIGTERM by ask_to_stop, not yet stopped

    def start(self, wanted: WorkloadDesired, env: dict[str, str]) -> Started:
        dirs: list[Path] = []
        if self.cgroups is not None:
            dirs = self.cgroups.create(wanted.tenant, unit_name(wanted), wanted.limits)
            left = self.cgroups.empty(dirs)  # what an earlier run of this replica left behind
            if left:
                raise HostActionError(
                    f"processes {pid_list(left)} of an earlier run of {wanted.label} cannot be "
                    f"stopped (in {dirs[0]}): see `ps -o pid,stat,cmd -p {left[0]}`"
                )
        procs = [str(p) for p in self.cgroups.procs_files(dirs)] if self.cgroups else []
        user = self.users.user_of(wanted)
        cwd = None
        if user is not None:
            own = {"HOME": str(user.home), "USER": user.name, "LOGNAME": user.name}
            env = env | {k: v for k, v in own.items() if k not in wanted.env}  # the spec's wins
            cwd = user.home
        run_as = None if user is None else (user.uid, user.gid)
        keep: tuple[str, ...] = ()
        read_only: tuple[tuple[str, str], ...] = ()
        if user is not None:  # a private /tmp: what of the host's /tmp it still sees
            keep = kept_visible(self.users.homes.parent, env, wanted, user)
            groups = frozenset(os.getgrouplist(user.name, user.gid))
            said = f"tenant {wanted.tenant}'s user {user.name}"
            read_only = granted_reads(wanted, Reader(said, user.uid, groups))
        stdout_path, stderr_path = log_paths(self.logs_dir, wanted.tenant, unit_name(wanted))
        recorded = self._exit_file(wanted)
        if recorded is not None:
            recorded.unlink(missing_ok=True)  # an earlier run's
        exit_file = str(recorded) if recorded is not None else None
        argv = process_argv(
            wanted,
            procs,
            run_as,
            private_tmp=user is not None,
            keep=keep,
            read_only=read_only,
            exit_file=exit_file,
        )
        with stdout_path.open("ab") as stdout, stderr_path.open("ab") as stderr:
            pid, ticks = self.children.spawn(argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd)
        applied = self.cgroups.read_back(dirs).describe() if self.cgroups and dirs else None
        return Started(
            pid=pid, start_ticks=ticks, cgroups=[str(d) for d in dirs], limits_applied=applied
        )

    def exit_status(self, record: WorkloadRecord) -> ExitStatus | None:
        if record.pid is None:
            return ExitStatus(note="never started")
        status = self.children.exit_status(record.pid, record.start_ticks)
        known = status is None or status.code is not None or status.signal is not None
        recorded = self._exit_file(record.desired)
        if known or recorded is None:
            return status
        try:  # not our child (adopted after a restart): its launching shell wrote the status
            code = int(recorded.read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return status
        return ExitStatus(code=code, note="adopted after a restart of gpuplex; status recorded")

    def _exit_file(self, wanted: WorkloadDesired) -> Path | None:
        """Where the exit status of a replica that is never restarted (a job) is recorded."""
        if wanted.restart.policy is not RestartPolicy.NEVER:
            return None
        return self.logs_dir / wanted.tenant / f"{unit_name(wanted)}.exit"

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
        self.empty(record)
        self.children.wait(pid, 2.0)
        self.children.exit_status(pid, record.start_ticks)
        self._asked.discard(pid)

    def release(self, record: WorkloadRecord) -> None:
        """Remove the cgroups of a replica that is gone for good."""
        if self.cgroups is not None and record.cgroups:
            self.cgroups.remove([Path(d) for d in record.cgroups])

    def empty(self, record: WorkloadRecord) -> list[int]:
        """Everything in the replica's cgroup is killed: a process that left its group (setsid,
        a double fork) is still in its cgroup."""
        if self.cgroups is None or not record.cgroups:
            return []
        return self.cgroups.empty([Path(d) for d in record.cgroups])

    def sweep(self) -> Swept:
        stopped: dict[str, list[int]] = {}
        left: dict[str, list[int]] = {}
        if self.cgroups is None:
            return Swept(stopped, left)
        for (tenant, unit), dirs in self.cgroups.replica_cgroups().items():
            label = f"{tenant}/{unit}"
            found = self.cgroups.pids(dirs)
            still = self.cgroups.empty(dirs)
            if found:
                stopped[label] = found
            if still:
                left[label] = still
            else:
                self.cgroups.remove(dirs)
        self.cgroups.remove_instance()
        return Swept(stopped, left)


def kept_visible(
    state_dir: Path, env: dict[str, str], wanted: WorkloadDesired, user: TenantUser
) -> tuple[str, ...]:
    """What a replica still reaches under its private /tmp, besides the folders granted to it in
    the spec (`reads`, host/grants.py): the state directory (gpuplex's own, made to be passed
    through: the tenant's home, the simulated driver, MPS pipes), and for a workload of the spec
    (written by the operator) its PYTHONPATH and its program's folder, each only if the replica's
    user could reach it on the host: a folder behind a parent it may not enter stays out of
    sight. Nothing is guessed from the command's arguments. A job (its file written by a tenant)
    keeps nothing it names."""
    folders = [str(state_dir.resolve())]
    if wanted.job:
        return tuple(folders)
    named: list[str] = [part for part in env.get("PYTHONPATH", "").split(os.pathsep) if part]
    program = wanted.argv[0] if wanted.argv else ""
    found = shutil.which(program, path=env.get("PATH")) if "/" not in program else program
    if found:
        named.append(str(Path(found).resolve().parent))
    groups = set(os.getgrouplist(user.name, user.gid))
    for real in dict.fromkeys(os.path.realpath(f) for f in named):
        if reachable_as(Path(real), user.uid, groups):
            folders.append(real)
    return tuple(dict.fromkeys(folders))


def reachable_as(folder: Path, uid: int, gids: set[int]) -> bool:
    """Whether a user (`uid`, in groups `gids`, without capabilities) can enter `folder` and
    every folder above it, by their owner, group and mode bits (an ACL that would let it in is
    not read: such a folder is taken as closed, the safe side)."""
    reader = Reader(str(uid), uid, frozenset(gids))
    for part in [folder, *folder.parents]:
        try:
            info = os.stat(part)
        except OSError:
            return False
        if not allows(info, reader, ENTER):
            return False
    return True


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
