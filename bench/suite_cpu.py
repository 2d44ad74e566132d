"""Where the test suite's CPU goes: every process a command starts (the pytest workers, the gpuplex
processes the tests start, the real components: vLLM, Kubernetes, Node.js, Chromium, PostgreSQL),
from the kernel's process accounting, which records each process as it exits, whatever killed it.

    sudo .venv/bin/python bench/suite_cpu.py                      # runs `make unit`
    sudo .venv/bin/python bench/suite_cpu.py -- .venv/bin/pytest -n 4 --dist loadgroup tests/unit

Needs root (acct(2)) and Debian's `acct` package only for `accton`, which turns the accounting on
and off (`apt-get install acct`). Prints the wall time, how busy the CPUs were over it
(/proc/stat), and a table of CPU seconds per kind of process, then the processes that used the
most. On 2 cores a suite whose CPUs are busy all the time takes (its CPU seconds) / 2: this table
says which part to make cheaper. Processes still running when the command ends (PostgreSQL and
Redis started by `make services`) count only what their exited children used. The accounting is
the whole machine's: run it on a machine that does nothing else.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime,
#: utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16]
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
#: comp_t and etime count in these ticks per second (AHZ)
TICKS_PER_S = 100

#: Kinds of process by the start of the name the kernel keeps (comm: 15 characters, or a thread's
#: name where a program names its main thread), checked in order; a pytest worker is found by its
#: parent.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vLLM engine (its main thread's names)", ("gloo_tcp_loop", "ZMQbg/")),
    ("python3.11 (tenants' processes run by `up`, the vLLM venv)", ("python3.11",)),
    ("Python: gpuplex processes and CLI runs", ("python", "gpuplex", "pytest")),
    ("Kubernetes control plane and Kueue", ("kube-", "etcd", "kueue")),
    ("Node.js (OpenID provider, Playwright)", ("node", "libuv-worker")),
    ("PostgreSQL backends", ("postgres",)),
    ("Chromium", ("chromium", "Chrome_", "ThreadPool", "HangWatcher", "PerfettoTrace")),
)
WORKERS = "pytest workers (the tests run in them)"


@dataclass(frozen=True, slots=True)
class Exited:
    comm: str
    pid: int
    ppid: int
    cpu_s: float
    life_s: float


def comp_t(value: int) -> int:
    """A comp_t: 13 bits of mantissa, 3 bits of base-8 exponent."""
    return (value & 0x1FFF) << (3 * (value >> 13))


def read_accounting(path: Path) -> Iterator[Exited]:
    data = path.read_bytes()
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        fields = ACCT_V3.unpack_from(data, offset)
        if fields[1] & 0x0F != 3:  # not a v3 record: this kernel writes another format
            raise SystemExit(f"{path}: record {offset // ACCT_V3.size} is not acct v3")
        utime, stime = comp_t(fields[10]), comp_t(fields[11])
        yield Exited(
            comm=fields[18].split(b"\0", 1)[0].decode(errors="replace"),
            pid=fields[6],
            ppid=fields[7],
            cpu_s=(utime + stime) / TICKS_PER_S,
            life_s=fields[9] / TICKS_PER_S,
        )


def kind_of(process: Exited, workers: set[int]) -> str:
    """The first kind one of whose names `process.comm` starts with (so `python3.11` is checked
    before `python`)."""
    if process.pid in workers:
        return WORKERS
    for kind, prefixes in KINDS:
        if process.comm.startswith(prefixes):
            return kind
    return "other"


def cpu_ticks() -> tuple[int, int]:
    """(busy, idle) jiffies of all CPUs since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values) - idle, idle


def run_accounted(command: list[str], accton: str) -> tuple[int, float, float, list[Exited]]:
    """Run `command` with process accounting on: its exit status, wall seconds, the share of CPU
    time busy over it, and every process that exited meanwhile."""
    with tempfile.TemporaryDirectory(prefix="gpuplex-suite-cpu-") as folder:
        log = Path(folder) / "pacct"
        log.touch()
        subprocess.run([accton, str(log)], check=True, capture_output=True)  # noqa: S603
        busy0, idle0 = cpu_ticks()
        started = time.monotonic()
        try:
            status = subprocess.call(command)  # noqa: S603 - the caller's own command
        finally:
            subprocess.run([accton, "off"], check=True, capture_output=True)  # noqa: S603
        wall_s = time.monotonic() - started
        busy1, idle1 = cpu_ticks()
        busy, idle = busy1 - busy0, idle1 - idle0
        return status, wall_s, busy / max(1, busy + idle), list(read_accounting(log))


def report(wall_s: float, busy: float, exited: list[Exited], top: int) -> None:
    pytest_pids = {p.pid for p in exited if p.comm == "pytest"}
    workers = {p.pid for p in exited if p.ppid in pytest_pids and p.comm == "python"}
    seconds: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for process in exited:
        kind = kind_of(process, workers)
        seconds[kind] += process.cpu_s
        count[kind] += 1
    total = sum(seconds.values())
    cores = os.cpu_count() or 1
    print(f"\nwall {wall_s:.0f} s on {cores} cores; CPUs busy {busy * 100:.1f} % of it")
    print(f"{'CPU s':>8} {'share':>6} {'processes':>9}  kind")
    for kind, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        print(f"{spent:8.1f} {spent / total * 100:5.1f}% {count[kind]:9d}  {kind}")
    print(f"{total:8.1f} {100:5.1f}% {len(exited):9d}  all processes that exited")
    print(f"\nthe {top} processes that used the most CPU")
    print(f"{'CPU s':>8} {'alive s':>8} {'pid':>8} {'parent':>8}  name")
    for process in sorted(exited, key=lambda p: -p.cpu_s)[:top]:
        print(
            f"{process.cpu_s:8.1f} {process.life_s:8.1f} {process.pid:8d} {process.ppid:8d}  "
            f"{process.comm}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=15, help="processes listed by CPU")
    parser.add_argument("command", nargs="*", default=["make", "unit"], help="after --")
    args = parser.parse_args(argv)
    accton = shutil.which("accton") or shutil.which("accton", path="/usr/sbin:/sbin")
    if accton is None:
        print("suite_cpu: needs `accton` (Debian: apt-get install acct)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("suite_cpu: process accounting needs root", file=sys.stderr)
        return 2
    status, wall_s, busy, exited = run_accounted(args.command, accton)
    report(wall_s, busy, exited, args.top)
    return status


if __name__ == "__main__":
    sys.exit(main())
