"""The numbers a replica's cgroup holds: the limits wanted (from the spec) and the limits applied
(read back from the cgroup filesystem), and the reads and writes of single cgroup files."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuplex.core.plural import counted
from gpuplex.core.spec.runtime import LimitsSpec
from gpuplex.errors import CgroupUnavailable

#: CFS period for every replica; the quota is `cores * CPU_PERIOD_US`.
CPU_PERIOD_US = 100_000
#: The kernel refuses a CFS quota below 1 ms.
MIN_CPU_QUOTA_US = 1_000
#: Memory limits are whole pages; the kernel rounds down, so we do too and read back what we wrote.
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
#: cgroup v1 reports "no limit" as the largest page count in bytes (9223372036854771712 on 64 bits).
V1_UNLIMITED_BYTES = 1 << 62
_GIB_BYTES = 1 << 30
_MIB_BYTES = 1 << 20


@dataclass(frozen=True)
class WantedLimits:
    """A LimitsSpec in the kernel's units; None is unlimited."""

    cpu_quota_us: int | None
    memory_max_bytes: int | None
    pids_max: int | None

    @classmethod
    def of(cls, limits: LimitsSpec) -> WantedLimits:
        quota_us = None
        if limits.cpu_cores is not None:
            quota_us = max(MIN_CPU_QUOTA_US, round(limits.cpu_cores * CPU_PERIOD_US))
        memory_bytes = None
        if limits.memory_gib is not None:
            pages = int(limits.memory_gib * _GIB_BYTES) // PAGE_BYTES
            memory_bytes = max(1, pages) * PAGE_BYTES
        return cls(cpu_quota_us=quota_us, memory_max_bytes=memory_bytes, pids_max=limits.pids)


@dataclass(frozen=True)
class AppliedLimits:
    """What the cgroup filesystem says, read back; None is unlimited."""

    version: int
    cpu_quota_us: int | None
    cpu_period_us: int
    memory_max_bytes: int | None
    pids_max: int | None

    @property
    def cpu_cores(self) -> float | None:
        return None if self.cpu_quota_us is None else self.cpu_quota_us / self.cpu_period_us

    def describe(self) -> str:
        """`cgroup v1: cpu 0.5 cores, memory 256 MiB, pids 64`."""
        cpu = "unlimited" if self.cpu_cores is None else counted(self.cpu_cores, "core")
        memory = "unlimited"
        if self.memory_max_bytes is not None:
            memory = f"{self.memory_max_bytes / _MIB_BYTES:g} MiB"
        pids = "unlimited" if self.pids_max is None else str(self.pids_max)
        return f"cgroup v{self.version}: cpu {cpu}, memory {memory}, pids {pids}"


_FIX = (
    "run the host agent as root on a host with a writable cgroup hierarchy "
    "(cgroup v2: with the cpu, memory and pids controllers delegated to it), "
    "or remove `limits:` from the workload"
)


def write_value(path: Path, value: str) -> None:
    """Write one value to one cgroup file; the kernel checks it at once."""
    try:
        with path.open("w") as file:
            file.write(value)
    except OSError as err:
        raise CgroupUnavailable(
            f"cannot write {value!r} to {path}: {err.strerror or err}; {_FIX}"
        ) from err


def read_value(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as err:
        raise CgroupUnavailable(f"cannot read {path}: {err.strerror or err}; {_FIX}") from err


def parse_limit(text: str) -> int | None:
    """`max` (v2, pids), `-1` (v1 cpu quota) or v1's huge "no limit" byte count are None."""
    if text == "max":
        return None
    value = int(text)
    return None if value < 0 or value >= V1_UNLIMITED_BYTES else value


def parse_oom_kills(text: str) -> int:
    """The `oom_kill N` line of v2 memory.events or v1 memory.oom_control; 0 if absent."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


def missing_controller(controller: str, where: Path) -> CgroupUnavailable:
    return CgroupUnavailable(
        f"the {controller} cgroup controller is not available at {where}, so the {controller} "
        f"limit cannot be enforced; enable it (cgroup v2: delegate it to the host agent; "
        f"cgroup v1: mount the {controller} hierarchy) or remove the limit from the workload"
    )


def make_dir(path: Path) -> None:
    """mkdir -p of a cgroup; idempotent."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CgroupUnavailable(
            f"cannot create cgroup {path}: {err.strerror or err}; {_FIX}"
        ) from err


def find_file(dirs: list[Path], name: str) -> Path | None:
    """The first of `dirs` holding the file `name` (v1 spreads a replica over hierarchies)."""
    for directory in dirs:
        if (directory / name).is_file():
            return directory / name
    return None
