"""cgroup v2: a replica's cgroup is one directory of the unified hierarchy,
`<root>/<parent>/<tenant>/<unit>`, with cpu, memory and pids enabled down the path to it."""

from __future__ import annotations

from pathlib import Path

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

#: The controllers a replica's limits use; memory is required, the others where the host has them.
CONTROLLERS = frozenset({"cpu", "memory", "pids"})


def available_controllers(root: Path) -> frozenset[str]:
    """Those of CONTROLLERS that `<root>/cgroup.controllers` lists; empty if it is missing."""
    try:
        listed = (root / "cgroup.controllers").read_text().split()
    except OSError:
        return frozenset()
    return CONTROLLERS & frozenset(listed)


class CgroupV2:
    version = 2

    def __init__(self, root: Path, parent: str, controllers: frozenset[str]) -> None:
        self.root = root
        self.parent = parent
        self.controllers = controllers

    def prepare(self) -> None:
        """Create `<root>/<parent>` and enable our controllers at every level down to it (a
        controller reaches a cgroup only through each of its ancestors)."""
        level = self.root
        self._enable_for_children(level)
        for part in self.parent.split("/"):
            level = level / part
            make_dir(level)
            self._enable_for_children(level)

    def _enable_for_children(self, cgroup: Path) -> None:
        """Add our controllers to `cgroup.subtree_control`, one at a time so that an error names
        the one the kernel refused."""
        control = cgroup / "cgroup.subtree_control"
        enabled = set(read_value(control).split()) if control.is_file() else set()
        for controller in sorted(self.controllers - enabled):
            write_value(control, f"+{controller}")

    def create(self, tenant: str, unit: str, wanted: WantedLimits) -> list[Path]:
        for controller, value in (("cpu", wanted.cpu_quota_us), ("pids", wanted.pids_max)):
            if value is not None and controller not in self.controllers:
                raise missing_controller(controller, self.root)
        tenant_dir = self.root / self.parent / tenant
        make_dir(tenant_dir)
        self._enable_for_children(tenant_dir)
        unit_dir = tenant_dir / unit
        make_dir(unit_dir)
        if "cpu" in self.controllers:
            quota = "max" if wanted.cpu_quota_us is None else str(wanted.cpu_quota_us)
            write_value(unit_dir / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        memory_bytes = wanted.memory_max_bytes
        write_value(unit_dir / "memory.max", "max" if memory_bytes is None else str(memory_bytes))
        swap = unit_dir / "memory.swap.max"
        if swap.is_file():  # absent without swap accounting
            write_value(swap, "max" if memory_bytes is None else "0")
        if "pids" in self.controllers:
            pids_max = wanted.pids_max
            write_value(unit_dir / "pids.max", "max" if pids_max is None else str(pids_max))
        return [unit_dir]

    def read_back(self, dirs: list[Path]) -> AppliedLimits:
        cpu = find_file(dirs, "cpu.max")
        memory = find_file(dirs, "memory.max")
        pids = find_file(dirs, "pids.max")
        quota_us, period_us = None, CPU_PERIOD_US
        if cpu is not None:
            quota_text, _, period_text = read_value(cpu).partition(" ")
            quota_us, period_us = parse_limit(quota_text), int(period_text or CPU_PERIOD_US)
        return AppliedLimits(
            version=2,
            cpu_quota_us=quota_us,
            cpu_period_us=period_us,
            memory_max_bytes=None if memory is None else parse_limit(read_value(memory)),
            pids_max=None if pids is None else parse_limit(read_value(pids)),
        )

    def instance_tops(self) -> list[Path]:
        return [self.root / self.parent]

    @staticmethod
    def kill_all(dirs: list[Path]) -> bool:
        """`cgroup.kill` (Linux 5.14+): the kernel kills every member, forks included."""
        kill = find_file(dirs, "cgroup.kill")
        if kill is None:
            return False
        write_value(kill, "1")
        return True

    @staticmethod
    def freeze(dirs: list[Path], frozen: bool) -> bool:
        freeze = find_file(dirs, "cgroup.freeze")
        if freeze is None:
            return False
        write_value(freeze, "1" if frozen else "0")
        return True

    def oom_kills(self, dirs: list[Path]) -> int:
        events = find_file(dirs, "memory.events")
        return 0 if events is None else parse_oom_kills(read_value(events))

    @staticmethod
    def proc_cgroup_path(proc_cgroup: str) -> str | None:
        """The unified hierarchy's line of /proc/<pid>/cgroup: `0::/gpuplex/acme/chat-1`."""
        for line in proc_cgroup.splitlines():
            if line.startswith("0::"):
                return line[3:]
        return None
