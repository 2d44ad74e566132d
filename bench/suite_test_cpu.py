"""Which tests the suite's CPU goes to: each test's CPU in its pytest worker and the CPU of the
processes it started and waited for, summed by test file (or folder), beside how busy the CPUs
were over the whole run.

    .venv/bin/python bench/suite_test_cpu.py                    # `make unit`, table by file
    .venv/bin/python bench/suite_test_cpu.py --depth 2          # by folder: tests/e2e, ...
    .venv/bin/python bench/suite_test_cpu.py -- .venv/bin/pytest -n 4 --dist loadgroup tests/e2e

Runs the command with this module as a pytest plugin (`-p bench.suite_test_cpu` in
PYTEST_ADDOPTS); each worker writes one line per test (`os.times()` before and after the test's
setup, call and teardown: its own CPU, and its waited-for children's, which holds the CLI runs and
servers the test started and stopped). bench/suite_cpu.py says the same run's CPU by kind of
process, from the kernel; this one by test. What neither test reaped (a session fixture's server
stopped at the end, a process another test's `Popen` reaped later, PostgreSQL, the kernel) counts
where it was reaped or nowhere: the `unattributed` line is the machine's busy CPU less the sum.
Runs without root; run it on a machine that does nothing else.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.suite_cpu import cpu_ticks
from gpuplex.settings import full_environment

#: Where each worker writes its lines (set by `main` for the command it runs).
OUT_ENV = "GPUPLEX_TEST_CPU_DIR"


@dataclass(frozen=True, slots=True)
class CpuOfTest:
    """One test: CPU seconds in the worker, of the children it reaped, and wall seconds."""

    nodeid: str
    worker_s: float
    children_s: float
    wall_s: float


# -- the plugin, in each pytest process --

_started: dict[str, tuple[float, float, float]] = {}


def _now() -> tuple[float, float, float]:
    times = os.times()
    own = times.user + times.system
    return own, times.children_user + times.children_system, time.monotonic()


def pytest_runtest_logstart(nodeid: str) -> None:
    if full_environment().get(OUT_ENV):
        _started[nodeid] = _now()


def pytest_runtest_logfinish(nodeid: str) -> None:
    began = _started.pop(nodeid, None)
    environment = full_environment()
    folder = environment.get(OUT_ENV)
    if began is None or not folder:
        return
    own, children, wall = _now()
    worker = environment.get("PYTEST_XDIST_WORKER", "main")
    line = f"{own - began[0]:.3f}\t{children - began[1]:.3f}\t{wall - began[2]:.3f}\t{nodeid}\n"
    with open(os.path.join(folder, f"{worker}.tsv"), "a", encoding="utf-8") as out:
        out.write(line)


# -- reading and reporting --


def read_lines(folder: Path) -> list[CpuOfTest]:
    """The workers' lines. Under pytest-xdist the controller sees each test's start and finish
    too but runs none: its file (`main.tsv`) is left out where worker files exist."""
    files = sorted(folder.glob("*.tsv"))
    if any(path.name != "main.tsv" for path in files):
        files = [path for path in files if path.name != "main.tsv"]
    tests = []
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines():
            worker_s, children_s, wall_s, nodeid = line.split("\t", 3)
            tests.append(CpuOfTest(nodeid, float(worker_s), float(children_s), float(wall_s)))
    return tests


def place(nodeid: str, depth: int) -> str:
    """The test file of `nodeid`, or its first `depth` path parts where depth > 0."""
    path = nodeid.split("::", 1)[0]
    return "/".join(path.split("/")[:depth]) if depth > 0 else path


@dataclass
class Row:
    tests: int = 0
    worker_s: float = 0.0
    children_s: float = 0.0
    wall_s: float = 0.0

    @property
    def cpu_s(self) -> float:
        return self.worker_s + self.children_s


def by_place(tests: Iterable[CpuOfTest], depth: int) -> dict[str, Row]:
    rows: dict[str, Row] = defaultdict(Row)
    for test in tests:
        row = rows[place(test.nodeid, depth)]
        row.tests += 1
        row.worker_s += test.worker_s
        row.children_s += test.children_s
        row.wall_s += test.wall_s
    return dict(rows)


def table(rows: dict[str, Row], busy_s: float | None, top: int) -> list[str]:
    total = sum(row.cpu_s for row in rows.values())
    shown = sorted(rows.items(), key=lambda pair: -pair[1].cpu_s)[:top]
    lines = [
        "| CPU s | share | in worker | children | test wall s | tests | where |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    whole = busy_s if busy_s and busy_s > total else total
    for name, row in shown:
        lines.append(
            f"| {row.cpu_s:.1f} | {100 * row.cpu_s / whole:.1f} % | {row.worker_s:.1f} | "
            f"{row.children_s:.1f} | {row.wall_s:.1f} | {row.tests} | {name} |"
        )
    if len(rows) > top:
        rest = [row for _, row in sorted(rows.items(), key=lambda p: -p[1].cpu_s)[top:]]
        cpu = sum(row.cpu_s for row in rest)
        count = sum(row.tests for row in rest)
        lines.append(f"| {cpu:.1f} | {100 * cpu / whole:.1f} % | | | | {count} | the rest |")
    if busy_s is not None and busy_s > total:
        left = busy_s - total
        lines.append(f"| {left:.1f} | {100 * left / whole:.1f} % | | | | | unattributed |")
    return lines


def busy_seconds() -> float:
    """CPU seconds all CPUs have been busy since boot (/proc/stat, as bench/suite_cpu.py reads it)."""
    busy, _ = cpu_ticks()
    return busy / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--depth", type=int, default=0, help="sum by folder: path parts kept")
    parser.add_argument("--top", type=int, default=30, help="rows shown")
    parser.add_argument("--keep", type=Path, help="write the workers' lines here (kept)")
    parser.add_argument("command", nargs="*", help="the command (default: make unit)")
    args = parser.parse_args(argv)
    command = args.command or ["make", "unit"]
    folder = args.keep or Path(tempfile.mkdtemp(prefix="gpuplex-test-cpu-"))
    folder.mkdir(parents=True, exist_ok=True)
    environment = full_environment()
    environment[OUT_ENV] = str(folder)
    plugin = "-p bench.suite_test_cpu"
    environment["PYTEST_ADDOPTS"] = f"{environment.get('PYTEST_ADDOPTS', '')} {plugin}".strip()
    root = str(Path(__file__).resolve().parents[1])
    environment["PYTHONPATH"] = os.pathsep.join(
        part for part in (root, environment.get("PYTHONPATH", "")) if part
    )
    print(f"running: {shlex.join(command)}", file=sys.stderr)
    busy_before, started = busy_seconds(), time.monotonic()
    done = subprocess.run(command, env=environment, check=False)  # noqa: S603 - the user's command
    busy_s, wall_s = busy_seconds() - busy_before, time.monotonic() - started
    tests = read_lines(folder)
    print(
        f"{len(tests)} tests; the command exited {done.returncode} after {wall_s:.0f} s; the CPUs"
    )
    print(f"were busy {busy_s:.0f} s ({100 * busy_s / (wall_s * (os.cpu_count() or 1)):.1f} %)\n")
    print("\n".join(table(by_place(tests, args.depth), busy_s, args.top)))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
