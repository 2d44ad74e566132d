"""One cgroup per workload replica: CPU, memory and pids limits the kernel enforces, and the set of
processes that make up the replica, whatever they fork or however they detach.

cgroup v2 (one directory in the unified hierarchy) where the host has it, the v1 memory, cpu and
pids hierarchies (and freezer, where mounted) otherwise. A replica's program joins its cgroup before
it runs: the launch wrapper writes its own pid into each file of `procs_files()` and then execs the
program.

Every gpuplex instance (one state directory) has a cgroup subtree of its own,
`<hierarchy>/gpuplex/<instance>/<tenant>/<unit>`: two instances on one host with the same tenant
names never see, count or kill each other's processes. `empty()` kills everything in a replica's
cgroup (v2 `cgroup.kill`, else freeze, SIGKILL every member, thaw), so a daemon a workload forked
and detached (`setsid`, double fork) goes with the replica."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path, PurePosixPath
from typing import Protocol

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.spec.runtime import LimitsSpec
from gpuplex.errors import CgroupUnavailable
from gpuplex.host import cgroup_v1, cgroup_v2
from gpuplex.host.cgroup_limits import AppliedLimits, WantedLimits, read_value

__all__ = ["AppliedLimits", "CgroupUnavailable", "Cgroups"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PROC = Path("/proc")


class CgroupBackend(Protocol):
    """What differs between cgroup v1 and v2."""

    version: int
    root: Path
    parent: str

    def prepare(self) -> None: ...

    def create(self, tenant: str, unit: str, wanted: WantedLimits) -> list[Path]: ...

    def read_back(self, dirs: list[Path]) -> AppliedLimits: ...

    def oom_kills(self, dirs: list[Path]) -> int: ...

    def proc_cgroup_path(self, proc_cgroup: str) -> str | None: ...

    def freeze(self, dirs: list[Path], frozen: bool) -> bool:
        """Freeze (or thaw) the cgroup; False where this host cannot."""
        ...

    def kill_all(self, dirs: list[Path]) -> bool:
        """SIGKILL every process in the cgroup in one kernel operation; False where this host
        cannot (then the caller freezes and signals each)."""
        ...

    def instance_tops(self) -> list[Path]:
        """This instance's cgroup directory in each hierarchy."""
        ...


def _backend_at(root: Path, parent: str) -> CgroupBackend | None:
    controllers = cgroup_v2.available_controllers(root)
    if "memory" in controllers:
        return cgroup_v2.CgroupV2(root, parent, controllers)
    hierarchies = cgroup_v1.find_hierarchies(root)
    if all(controller in hierarchies for controller in cgroup_v1.REQUIRED):
        return cgroup_v1.CgroupV1(root, parent, hierarchies)
    return None


def _check_name(kind: str, name: str) -> None:
    """A tenant or unit is one directory name: no separators, no `.`/`..`."""
    if not name or name in {".", ".."} or any(char in name for char in "/\0\n"):
        raise ValueError(f"{kind} {name!r} cannot name a cgroup directory")


def instance_parent(instance: str) -> str:
    """The cgroup path, under each hierarchy, of one gpuplex instance's replicas."""
    _check_name("instance", instance)
    return f"gpuplex/{instance}"


class Cgroups:
    """The replicas' cgroups under `<parent>/<tenant>/<unit>` in one host's cgroup hierarchy."""

    def __init__(self, backend: CgroupBackend) -> None:
        self._backend = backend
        self.version = backend.version
        self.root = backend.root
        self.parent = backend.parent

    @staticmethod
    def detect(root: Path = CGROUP_ROOT, parent: str = "gpuplex") -> Cgroups | None:
        """v2 if `<root>/cgroup.controllers` lists memory, else v1 if the memory and cpu hierarchies
        exist; None if neither, or if we cannot create `<parent>` there (see unavailable_reason).
        `parent` is a relative path, such as `instance_parent(...)`."""
        for part in parent.split("/"):
            _check_name("parent", part)
        backend = _backend_at(root, parent)
        if backend is None:
            return None
        try:
            backend.prepare()
        except CgroupUnavailable:
            return None
        return Cgroups(backend)

    @staticmethod
    def unavailable_reason(root: Path = CGROUP_ROOT) -> str:
        """Why detect() may find nothing usable at `root`, and what to do; changes nothing."""
        fix = "or run workloads without `limits:`"
        if "memory" in cgroup_v2.available_controllers(root):
            if not os.access(root, os.W_OK):
                return (
                    f"cgroup v2 at {root} is not writable by this process (uid {os.getuid()}): "
                    f"run the host agent as root or in a delegated cgroup (systemd Delegate=yes), {fix}"
                )
            return (
                f"cgroup v2 at {root} is writable, but the cpu, memory and pids controllers could "
                f"not be enabled in its cgroup.subtree_control (a cgroup that holds processes "
                f"cannot delegate them): run the host agent in a cgroup of its own, {fix}"
            )
        hierarchies = cgroup_v1.find_hierarchies(root)
        if all(controller in hierarchies for controller in cgroup_v1.REQUIRED):
            locked = [str(path) for path in hierarchies.values() if not os.access(path, os.W_OK)]
            return (
                f"cgroup v1 hierarchies {', '.join(locked)} are not writable by this process "
                f"(uid {os.getuid()}): run the host agent as root, {fix}"
                if locked
                else f"cgroup v1 at {root} is writable, yet creating a cgroup there failed: "
                f"check that the memory and cpu hierarchies are cgroup mounts, {fix}"
            )
        return (
            f"no usable cgroup hierarchy at {root}: cgroup v2 needs {root}/cgroup.controllers "
            f"listing memory, cgroup v1 needs the memory and cpu hierarchies "
            f"(found: {', '.join(sorted(hierarchies)) or 'none'}); mount cgroup2 at {root}, {fix}"
        )

    def create(self, tenant: str, unit: str, limits: LimitsSpec) -> list[Path]:
        """Make (or update) the cgroup of one replica and write its limits; unset limits are
        written as unlimited, so applying looser limits works. Returns the cgroup directories."""
        _check_name("tenant", tenant)
        _check_name("unit", unit)
        return self._backend.create(tenant, unit, WantedLimits.of(limits))

    def procs_files(self, dirs: list[Path]) -> list[Path]:
        """The files a process writes its pid to in order to join the cgroup."""
        return [directory / "cgroup.procs" for directory in dirs]

    def read_back(self, dirs: list[Path]) -> AppliedLimits:
        return self._backend.read_back(dirs)

    def pids(self, dirs: list[Path]) -> list[int]:
        """Every process in the cgroup (the union over v1's hierarchies), sorted."""
        found: set[int] = set()
        for procs in self.procs_files(dirs):
            if procs.is_file():
                found.update(int(pid) for pid in read_value(procs).split())
        return sorted(found)

    def oom_kills(self, dirs: list[Path]) -> int:
        """How many processes the kernel has OOM-killed in this cgroup since it was made."""
        return self._backend.oom_kills(dirs)

    def empty(self, dirs: list[Path], timeout_s: float = 5.0) -> list[int]:
        """Kill every process in the cgroup, forked children and detached daemons included, and
        wait until none is left; returns the pids still there after `timeout_s` (none, unless
        the kernel could not stop them: a process in uninterruptible sleep, say)."""
        if not self.pids(dirs):
            return []
        if not self._backend.kill_all(dirs):
            frozen = self._backend.freeze(dirs, True)  # nothing can fork while we signal
            try:
                _kill_each(self.pids(dirs))
            finally:
                if frozen:
                    self._backend.freeze(dirs, False)  # SIGKILL is acted on once thawed
        deadline = now_s() + timeout_s
        while True:
            left = self.pids(dirs)
            if not left or now_s() >= deadline:
                return left
            _kill_each(left)  # unfrozen v1 without a freezer: what forked meanwhile
            sleep_s(0.02)

    def replica_cgroups(self) -> dict[tuple[str, str], list[Path]]:
        """(tenant, unit) -> cgroup directories of every replica cgroup of this instance on the
        host, whether or not gpuplex's records still name it."""
        found: dict[tuple[str, str], list[Path]] = {}
        for top in self._backend.instance_tops():
            for unit_dir in sorted(top.glob("*/*")):
                if unit_dir.is_dir():
                    found.setdefault((unit_dir.parent.name, unit_dir.name), []).append(unit_dir)
        return found

    def remove_instance(self) -> None:
        """rmdir the empty tenant directories and this instance's own (v2 needs leaves first)."""
        for top in self._backend.instance_tops():
            self.remove([path for path in top.glob("*") if path.is_dir()] + [top])

    def remove(self, dirs: list[Path]) -> None:
        """rmdir the cgroup, deepest first. Gone already is fine; one that still holds processes
        stays (the caller stops them and tries again)."""
        for directory in sorted(dirs, key=lambda path: len(path.parts), reverse=True):
            try:
                directory.rmdir()
            except FileNotFoundError:
                continue
            except OSError as err:
                if err.errno in {errno.EBUSY, errno.ENOTEMPTY}:
                    continue
                raise CgroupUnavailable(
                    f"cannot remove cgroup {directory}: {err.strerror or err}; "
                    f"run the host agent as root"
                ) from err

    def belongs_to(self, pid: int) -> tuple[str, str] | None:
        """(tenant, unit) if the process is in one of our replica cgroups, from /proc/<pid>/cgroup
        (the memory hierarchy on v1); None if not, or if the process is gone."""
        try:
            proc_cgroup = (_PROC / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        path = self._backend.proc_cgroup_path(proc_cgroup)
        if path is None:
            return None
        parts = PurePosixPath(path).parts  # ("/", *parent, tenant, unit, ...)
        ours = ("/", *self.parent.split("/"))
        if len(parts) >= len(ours) + 2 and parts[: len(ours)] == ours:
            return parts[len(ours)], parts[len(ours) + 1]
        return None


def _kill_each(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
