"""cgroup v1: a replica's cgroup is one directory in each of the memory, cpu, pids and freezer
hierarchies, `<hierarchy>/<parent>/<tenant>/<unit>`. The freezer (where mounted) lets `empty()`
stop a forking workload without a race: frozen, nothing forks while each member is signalled."""

from __future__ import annotations

from pathlib import Path

from gpuplex.clock import now_s, sleep_s
from gpuplex.host.cgroup_limits import (
    CPU_PERIOD_US,
    AppliedLimits,
    WantedLimits,
    find_file,
    make_dir,
    missing_controller,
    parse_limit,
    parse_oom_kills,
    read_value,
    write_value,
)

#: Directory names a v1 hierarchy is mounted under; cpu is often co-mounted with cpuacct.
HIERARCHY_NAMES = {
    "memory": ("memory",),
    "cpu": ("cpu", "cpu,cpuacct", "cpuacct,cpu"),
    "pids": ("pids",),
    "freezer": ("freezer",),
}
#: Without these two there is no v1 fallback; pids is optional (a pids limit then fails to apply),
#: and so is the freezer (without it, a replica's processes are killed in rounds until none is left).
REQUIRED = ("memory", "cpu")


def find_hierarchies(root: Path) -> dict[str, Path]:
    """controller -> hierarchy mount, for those present under `root`."""
    found: dict[str, Path] = {}
    for controller, names in HIERARCHY_NAMES.items():
        for name in names:
            if (root / name).is_dir():
                found[controller] = root / name
                break
    return found


class CgroupV1:
    version = 1

    def __init__(self, root: Path, parent: str, hierarchies: dict[str, Path]) -> None:
        self.root = root
        self.parent = parent
        self.hierarchies = hierarchies

    def prepare(self) -> None:
        for hierarchy in self.hierarchies.values():
            make_dir(hierarchy / self.parent)

    def create(self, tenant: str, unit: str, wanted: WantedLimits) -> list[Path]:
        if wanted.pids_max is not None and "pids" not in self.hierarchies:
            raise missing_controller("pids", self.root)
        dirs: dict[str, Path] = {}
        for controller, hierarchy in self.hierarchies.items():
            dirs[controller] = hierarchy / self.parent / tenant / unit
            make_dir(dirs[controller])
        self._write_memory(dirs["memory"], wanted.memory_max_bytes)
        write_value(dirs["cpu"] / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        quota_us = wanted.cpu_quota_us
        write_value(dirs["cpu"] / "cpu.cfs_quota_us", "-1" if quota_us is None else str(quota_us))
        if "pids" in dirs:
            pids_max = wanted.pids_max
            write_value(dirs["pids"] / "pids.max", "max" if pids_max is None else str(pids_max))
        return list(dirs.values())

    @staticmethod
    def _write_memory(directory: Path, memory_bytes: int | None) -> None:
        """memory+swap equal to memory: the kernel OOM-kills instead of swapping. memsw must stay >=
        the memory limit at every step, so lift it first, set the limit, then bring memsw down."""
        value = "-1" if memory_bytes is None else str(memory_bytes)
        memsw = directory / "memory.memsw.limit_in_bytes"
        has_memsw = memsw.is_file()
        if has_memsw:
            write_value(memsw, "-1")
        write_value(directory / "memory.limit_in_bytes", value)
        if has_memsw:
            write_value(memsw, value)

    def read_back(self, dirs: list[Path]) -> AppliedLimits:
        quota = find_file(dirs, "cpu.cfs_quota_us")
        period = find_file(dirs, "cpu.cfs_period_us")
        memory = find_file(dirs, "memory.limit_in_bytes")
        pids = find_file(dirs, "pids.max")
        return AppliedLimits(
            version=1,
            cpu_quota_us=None if quota is None else parse_limit(read_value(quota)),
            cpu_period_us=CPU_PERIOD_US if period is None else int(read_value(period)),
            memory_max_bytes=None if memory is None else parse_limit(read_value(memory)),
            pids_max=None if pids is None else parse_limit(read_value(pids)),
        )

    def instance_tops(self) -> list[Path]:
        return [hierarchy / self.parent for hierarchy in self.hierarchies.values()]

    @staticmethod
    def kill_all(dirs: list[Path]) -> bool:
        return False  # v1 has no cgroup.kill

    @staticmethod
    def freeze(dirs: list[Path], frozen: bool) -> bool:
        state = find_file(dirs, "freezer.state")
        if state is None:
            return False
        write_value(state, "FROZEN" if frozen else "THAWED")
        deadline = now_s() + 2.0
        while frozen and read_value(state) != "FROZEN" and now_s() < deadline:
            sleep_s(0.01)  # FREEZING: some task has not stopped yet
        return True

    def oom_kills(self, dirs: list[Path]) -> int:
        control = find_file(dirs, "memory.oom_control")
        return 0 if control is None else parse_oom_kills(read_value(control))

    @staticmethod
    def proc_cgroup_path(proc_cgroup: str) -> str | None:
        """The memory hierarchy's line of /proc/<pid>/cgroup: `4:memory:/gpuplex/acme/chat-1`."""
        for line in proc_cgroup.splitlines():
            fields = line.split(":", 2)
            if len(fields) == 3 and "memory" in fields[1].split(","):
                return fields[2]
        return None
