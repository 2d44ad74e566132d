"""One cgroup per workload replica: CPU, memory and pids limits the kernel enforces.

cgroup v2 (one directory in the unified hierarchy) where the host has it, the v1 memory, cpu and
pids hierarchies otherwise. A replica's program joins its cgroup before it runs: the launch wrapper
writes its own pid into each file of `procs_files()` and then execs the program."""

from __future__ import annotations

import errno
import os
from pathlib import Path, PurePosixPath
from typing import Protocol

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
        exist; None if neither, or if we cannot create `<parent>` there (see unavailable_reason)."""
        _check_name("parent", parent)
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
        parts = PurePosixPath(path).parts  # ("/", parent, tenant, unit, ...)
        if len(parts) >= 4 and parts[0] == "/" and parts[1] == self.parent:
            return parts[2], parts[3]
        return None
