"""Replica cgroups: the limits read back as written, and the kernel enforces them on real processes
(a memory hog is OOM-killed while its neighbour lives; a busy loop is throttled). The first half uses
the host's real cgroup hierarchy and skips where there is none, unless GPUPLEX_REQUIRE_CGROUPS=1
(CI), where that is a failure. The second half runs on fake cgroup roots under tmp_path."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpuplex.core.spec.runtime import LimitsSpec
from gpuplex.errors import CgroupUnavailable, ErrorCode
from gpuplex.host.cgroup_v1 import CgroupV1
from gpuplex.host.cgroup_v2 import CgroupV2
from gpuplex.host.cgroups import AppliedLimits, Cgroups

ROOT = Path("/sys/fs/cgroup")
MIB = 1 << 20
_parents = itertools.count()

# The launch wrapper's protocol: write our pid into each cgroup.procs before `--`, then exec.
JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
SLEEP = "import time; time.sleep(60)"
BUSY = "while True: pass"
# 64 chunks of 16 MiB = 1 GiB; `b"x" * n` writes every byte, so every page is really touched.
HOG = "chunks = []\nfor _ in range(64):\n    chunks.append(b'x' * (16 << 20))\n"


@dataclass
class CgroupHost:
    cgroups: Cgroups
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self, dirs: list[Path], code: str) -> subprocess.Popen[bytes]:
        procs = [str(path) for path in self.cgroups.procs_files(dirs)]
        argv = ["/bin/sh", "-c", JOIN, "join", *procs, "--", sys.executable, "-c", code]
        process = subprocess.Popen(  # noqa: S603 - our interpreter and the test's own code
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.started.append(process)
        return process

    def wait_until_inside(self, dirs: list[Path], process: subprocess.Popen[bytes]) -> None:
        """Until the wrapper has joined every cgroup (v1: one per hierarchy, one at a time)."""
        until(
            lambda: all(process.pid in self.cgroups.pids([path]) for path in dirs),
            f"pid {process.pid} in {dirs}",
        )


def until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _remove_tree(parent: str) -> list[str]:
    """Kill whatever is left in our test cgroups and rmdir them leaf first; returns leftovers."""
    tops = [path for path in [*ROOT.glob(f"*/{parent}"), ROOT / parent] if path.is_dir()]
    left: list[str] = []
    for top in tops:
        dirs = [path for path in top.rglob("*") if path.is_dir()]
        for directory in [*sorted(dirs, key=lambda p: len(p.parts), reverse=True), top]:
            procs = directory / "cgroup.procs"
            deadline = time.monotonic() + 10
            while True:
                for pid in procs.read_text().split() if procs.is_file() else []:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                try:
                    directory.rmdir()
                    break
                except OSError as err:
                    if err.errno not in {errno.EBUSY, errno.ENOTEMPTY}:
                        raise
                    if time.monotonic() > deadline:
                        left.append(str(directory))
                        break
                    time.sleep(0.05)
    return left


@pytest.fixture
def cgroup_host() -> Iterator[CgroupHost]:
    parent = f"gpuplex-test-{os.getpid()}-{next(_parents)}"
    try:
        cgroups = Cgroups.detect(ROOT, parent)
        if cgroups is None:
            reason = Cgroups.unavailable_reason(ROOT)
            if os.environ.get("GPUPLEX_REQUIRE_CGROUPS") == "1":
                pytest.fail(f"GPUPLEX_REQUIRE_CGROUPS=1 but: {reason}")
            pytest.skip(reason)
        running = CgroupHost(cgroups)
        try:
            yield running
        finally:
            for process in running.started:
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=10)
    finally:
        assert _remove_tree(parent) == []


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throttled_periods(dirs: list[Path]) -> int:
    """`nr_throttled` of cpu.stat (v1 cpu hierarchy, v2 unit directory)."""
    for directory in dirs:
        stat = directory / "cpu.stat"
        if stat.is_file():
            for line in stat.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "nr_throttled":
                    return int(value)
    raise AssertionError(f"no nr_throttled in cpu.stat of {dirs}")


def test_limits_read_back_as_asked_and_unset_limits_as_unlimited(cgroup_host: CgroupHost) -> None:
    cgroups = cgroup_host.cgroups
    dirs = cgroups.create("acme", "chat-1", LimitsSpec(cpu_cores=0.5, memory_gib=0.25, pids=64))

    applied = cgroups.read_back(dirs)
    assert applied == AppliedLimits(
        version=cgroups.version,
        cpu_quota_us=50_000,
        cpu_period_us=100_000,
        memory_max_bytes=256 * MIB,
        pids_max=64,
    )
    asked = "cpu 0.5 cores, memory 256 MiB, pids 64"
    assert applied.describe() == f"cgroup v{cgroups.version}: {asked}"
    memsw = dirs[0] / "memory.memsw.limit_in_bytes"
    if memsw.is_file():  # v1 with swap accounting: memory+swap equals memory, so no swap
        assert int(memsw.read_text()) == 256 * MIB

    assert cgroups.create("acme", "chat-1", LimitsSpec()) == dirs
    assert cgroups.read_back(dirs) == AppliedLimits(
        version=cgroups.version,
        cpu_quota_us=None,
        cpu_period_us=100_000,
        memory_max_bytes=None,
        pids_max=None,
    )
    unlimited = "cpu unlimited, memory unlimited, pids unlimited"
    assert cgroups.read_back(dirs).describe() == f"cgroup v{cgroups.version}: {unlimited}"


@pytest.mark.slow
def test_memory_hog_is_oom_killed_and_its_neighbour_lives(cgroup_host: CgroupHost) -> None:
    cgroups = cgroup_host.cgroups
    hog_dirs = cgroups.create("acme", "hog-1", LimitsSpec(memory_gib=0.125))
    calm_dirs = cgroups.create("acme", "calm-1", LimitsSpec(memory_gib=1))
    neighbour = cgroup_host.start(calm_dirs, SLEEP)
    cgroup_host.wait_until_inside(calm_dirs, neighbour)

    hog = cgroup_host.start(hog_dirs, HOG)

    assert hog.wait(timeout=60) == -signal.SIGKILL
    assert cgroups.oom_kills(hog_dirs) >= 1
    assert cgroups.oom_kills(calm_dirs) == 0
    assert neighbour.poll() is None


@pytest.mark.slow
def test_cpu_limit_throttles_a_busy_loop(cgroup_host: CgroupHost) -> None:
    """Holds on a loaded machine too: the quota is an upper bound the kernel enforces whatever else
    runs, and 5 % of a core is reached even when the loop gets little CPU."""
    cgroups = cgroup_host.cgroups
    limited_dirs = cgroups.create("acme", "slow-1", LimitsSpec(cpu_cores=0.05))
    free_dirs = cgroups.create("acme", "free-1", LimitsSpec())
    limited = cgroup_host.start(limited_dirs, BUSY)
    free = cgroup_host.start(free_dirs, BUSY)  # the control: the same loop, unlimited, beside it
    cgroup_host.wait_until_inside(limited_dirs, limited)
    started_s, started_cpu_s = time.monotonic(), cpu_seconds(limited.pid)
    until(lambda: throttled_periods(limited_dirs) > 0, "the limited loop throttled", 20)
    time.sleep(1.0)
    used_s = cpu_seconds(limited.pid) - started_cpu_s
    wall_s = time.monotonic() - started_s

    assert limited.pid in cgroups.pids(limited_dirs)
    # at most 5 ms per 100 ms period: 0.05 * wall, plus one period and a clock tick of slack
    assert used_s <= 0.05 * wall_s + 0.1 + 0.02
    assert throttled_periods(free_dirs) == 0
    assert cpu_seconds(free.pid) > 0


def test_pids_belongs_to_and_remove(cgroup_host: CgroupHost) -> None:
    cgroups = cgroup_host.cgroups
    dirs = cgroups.create("acme", "chat-1", LimitsSpec())
    process = cgroup_host.start(dirs, SLEEP)
    cgroup_host.wait_until_inside(dirs, process)

    assert cgroups.pids(dirs) == [process.pid]
    assert cgroups.belongs_to(process.pid) == ("acme", "chat-1")
    assert cgroups.belongs_to(os.getpid()) is None

    cgroups.remove(dirs)  # busy: left in place, no error
    assert all(path.is_dir() for path in dirs)

    process.kill()
    process.wait(timeout=10)
    until(lambda: cgroups.pids(dirs) == [], "an empty cgroup")
    cgroups.remove(dirs)
    assert not any(path.exists() for path in dirs)
    cgroups.remove(dirs)  # gone already: fine
    assert cgroups.pids(dirs) == []
    assert cgroups.belongs_to(process.pid) is None


# --- fake cgroup roots: detection, parsing, and the files create() writes --------------------


def fake_root(tmp_path: Path, controllers: str | None, *dirs: str) -> Path:
    if controllers is not None:
        (tmp_path / "cgroup.controllers").write_text(controllers)
    for name in dirs:
        (tmp_path / name).mkdir()
    return tmp_path


def test_detect_chooses_v2_when_cgroup_controllers_lists_memory(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "cpuset cpu io memory pids\n", "memory", "cpu")
    cgroups = Cgroups.detect(root, "gpuplex")
    assert cgroups is not None
    assert cgroups.version == 2
    assert (root / "gpuplex").is_dir()


@pytest.mark.parametrize("cpu", ["cpu", "cpu,cpuacct"])
def test_detect_falls_back_to_v1_hierarchies(tmp_path: Path, cpu: str) -> None:
    root = fake_root(tmp_path, "", "memory", cpu, "pids")  # v2 mounted but with no controllers
    cgroups = Cgroups.detect(root, "gpuplex")
    assert cgroups is not None
    assert cgroups.version == 1
    assert all((root / name / "gpuplex").is_dir() for name in ["memory", cpu, "pids"])


@pytest.mark.parametrize(
    ("controllers", "dirs"),
    [(None, ()), ("cpu io pids\n", ("cpu",)), (None, ("memory",)), ("", ("cpu", "pids"))],
)
def test_detect_finds_nothing_without_memory_and_cpu(
    tmp_path: Path, controllers: str | None, dirs: tuple[str, ...]
) -> None:
    root = fake_root(tmp_path, controllers, *dirs)
    assert Cgroups.detect(root, "gpuplex") is None
    assert not (root / "gpuplex").exists()
    reason = Cgroups.unavailable_reason(root)
    assert reason.startswith(f"no usable cgroup hierarchy at {root}")
    assert "mount cgroup2" in reason


@pytest.mark.parametrize(
    ("cpu_max", "memory_max", "pids_max", "expected"),
    [
        ("max 100000", "max", "max", (None, 100_000, None, None)),
        ("50000 100000", "268435456", "64", (50_000, 100_000, 256 * MIB, 64)),
        ("20000 50000\n", "4096\n", "8\n", (20_000, 50_000, 4096, 8)),
    ],
)
def test_v2_read_back_parses_the_files(
    tmp_path: Path,
    cpu_max: str,
    memory_max: str,
    pids_max: str,
    expected: tuple[int | None, int, int | None, int | None],
) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    (tmp_path / "memory.max").write_text(memory_max)
    (tmp_path / "pids.max").write_text(pids_max)
    applied = CgroupV2(tmp_path, "gpuplex", frozenset()).read_back([tmp_path])
    assert applied == AppliedLimits(2, *expected)


@pytest.mark.parametrize(
    ("quota", "memory", "pids", "expected"),
    [
        ("-1", "9223372036854771712", "max", (None, 100_000, None, None)),
        ("20000", "134217728", "64", (20_000, 100_000, 128 * MIB, 64)),
    ],
)
def test_v1_read_back_parses_the_files_across_hierarchies(
    tmp_path: Path,
    quota: str,
    memory: str,
    pids: str,
    expected: tuple[int | None, int, int | None, int | None],
) -> None:
    cpu_dir, memory_dir, pids_dir = (tmp_path / name for name in ["cpu", "memory", "pids"])
    for directory in (cpu_dir, memory_dir, pids_dir):
        directory.mkdir()
    (cpu_dir / "cpu.cfs_quota_us").write_text(quota + "\n")
    (cpu_dir / "cpu.cfs_period_us").write_text("100000\n")
    (memory_dir / "memory.limit_in_bytes").write_text(memory + "\n")
    (pids_dir / "pids.max").write_text(pids + "\n")
    applied = CgroupV1(tmp_path, "gpuplex", {}).read_back([memory_dir, cpu_dir, pids_dir])
    assert applied == AppliedLimits(1, *expected)


@pytest.mark.parametrize(
    ("controllers", "dirs"), [("cpu memory pids", ()), ("", ("memory", "cpu", "pids"))]
)
def test_create_on_a_fake_root_writes_what_read_back_returns(
    tmp_path: Path, controllers: str, dirs: tuple[str, ...]
) -> None:
    cgroups = Cgroups.detect(fake_root(tmp_path, controllers, *dirs), "gpuplex")
    assert cgroups is not None
    limits = LimitsSpec(cpu_cores=1.5, memory_gib=2, pids=100)
    created = cgroups.create("acme", "chat-1", limits)
    assert all(path.parts[-3:] == ("gpuplex", "acme", "chat-1") for path in created)
    assert cgroups.read_back(created).describe() == (
        f"cgroup v{cgroups.version}: cpu 1.5 cores, memory 2048 MiB, pids 100"
    )
    assert cgroups.create("acme", "chat-1", LimitsSpec()) == created
    applied = cgroups.read_back(created)
    assert (applied.cpu_quota_us, applied.memory_max_bytes, applied.pids_max) == (None, None, None)


def test_v1_memory_and_swap_limit_are_equal(tmp_path: Path) -> None:
    cgroups = Cgroups.detect(fake_root(tmp_path, None, "memory", "cpu"), "gpuplex")
    assert cgroups is not None
    memory_dir = tmp_path / "memory" / "gpuplex" / "acme" / "chat-1"
    memory_dir.mkdir(parents=True)
    (memory_dir / "memory.memsw.limit_in_bytes").write_text("-1")
    cgroups.create("acme", "chat-1", LimitsSpec(memory_gib=0.5))
    assert (memory_dir / "memory.memsw.limit_in_bytes").read_text() == str(512 * MIB)


def test_a_pids_limit_without_the_pids_controller_is_an_error(tmp_path: Path) -> None:
    cgroups = Cgroups.detect(fake_root(tmp_path, None, "memory", "cpu"), "gpuplex")
    assert cgroups is not None
    with pytest.raises(CgroupUnavailable, match="pids cgroup controller") as caught:
        cgroups.create("acme", "chat-1", LimitsSpec(pids=64))
    assert caught.value.code is ErrorCode.HOST_CGROUP


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_names_that_are_not_one_directory_are_refused(tmp_path: Path, name: str) -> None:
    cgroups = Cgroups.detect(fake_root(tmp_path, "memory"), "gpuplex")
    assert cgroups is not None
    with pytest.raises(ValueError, match="cannot name a cgroup directory"):
        cgroups.create(name, "chat-1", LimitsSpec())
    with pytest.raises(ValueError, match="cannot name a cgroup directory"):
        cgroups.create("acme", name, LimitsSpec())


@pytest.mark.parametrize(
    ("version", "text", "expected"),
    [
        (2, "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n", 2),
        (2, "low 0\nhigh 0\nmax 0\noom 0\n", 0),
        (1, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3),
        (1, "oom_kill_disable 0\nunder_oom 0\n", 0),
    ],
)
def test_oom_kills_parses_the_counter(
    tmp_path: Path, version: int, text: str, expected: int
) -> None:
    if version == 2:
        (tmp_path / "memory.events").write_text(text)
        assert CgroupV2(tmp_path, "gpuplex", frozenset()).oom_kills([tmp_path]) == expected
    else:
        (tmp_path / "memory.oom_control").write_text(text)
        assert CgroupV1(tmp_path, "gpuplex", {}).oom_kills([tmp_path]) == expected


@pytest.mark.parametrize(
    ("proc_cgroup", "v1_path", "v2_path"),
    [
        ("4:memory:/gpuplex/acme/chat-1\n1:cpu:/\n0::/\n", "/gpuplex/acme/chat-1", "/"),
        ("3:cpu,cpuacct:/x\n2:memory:/y\n", "/y", None),
        ("0::/gpuplex/acme/chat-1\n", None, "/gpuplex/acme/chat-1"),
    ],
)
def test_proc_cgroup_lines(proc_cgroup: str, v1_path: str | None, v2_path: str | None) -> None:
    assert CgroupV1.proc_cgroup_path(proc_cgroup) == v1_path
    assert CgroupV2.proc_cgroup_path(proc_cgroup) == v2_path
