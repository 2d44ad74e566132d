"""CLI start-up benchmark: how long `gpuplex --help`, `gpuplex validate` and `gpuplex plan` of the
laptop example take, and one call of the control plane's API (`gpuplex job show`, answered at once
by a stand-in server in this process: the cost is the command's own, its HTTP client included), for
the working tree (after) against a git ref (before) in the same run.

    make bench-cli                                       # against HEAD, 10 runs each
    .venv/bin/python bench/cli_start.py [--against REF] [--runs 10] [--spec examples/laptop.yaml]

REF (default HEAD) is checked out in a temporary `git worktree` (bench/gateway_procs.py's
`checkout`, removed at the end). Each command runs as `python -m gpuplex.cli ...` in a process of
its own, with the tree's src/ first on PYTHONPATH (one interpreter and one venv for both trees),
on the working tree's spec file, before and after alternating run by run so that the machine's
drift falls on both. One untimed run of each first (it writes the tree's .pyc files) also checks
that both trees print the same thing.

Per command: the best and the median wall time of each tree, after / before of the best, and the
CPU time (user + sys of the child, `getrusage(RUSAGE_CHILDREN)`; best of the runs), which a loaded
machine disturbs less than wall time. The target is a wall time of at most 0.35 s per command on an
idle 2-core machine; the load average is printed before and after so that a loaded run says so.
Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file (`python bench/cli_start.py`, as `make bench-cli` does), Python puts bench/ on
# sys.path rather than the project root, which the `from bench... import` lines below need.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import resource
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rich.console import Console
from rich.table import Table

from bench.gateway_procs import checkout, describe_ref, describe_working_tree
from bench.planner_measure import machine
from gpuplex.settings import inherited_environment

ROOT = Path(__file__).resolve().parent.parent
LAPTOP = ROOT / "examples" / "laptop.yaml"
#: The wall time each command should stay within on an idle 2-core machine.
TARGET_S = 0.35
DEFAULT_RUNS = 10


@dataclass(frozen=True)
class Timed:
    wall_s: float
    cpu_s: float


@dataclass
class Row:
    """One command's runs in each tree."""

    command: tuple[str, ...]
    before: list[Timed] = field(default_factory=list)
    after: list[Timed] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "gpuplex " + " ".join(
            Path(word).name if word.endswith(".yaml") else "URL" if "://" in word else word
            for word in self.command
        )


def best_wall(runs: Sequence[Timed]) -> float:
    return min(run.wall_s for run in runs)


def median_wall(runs: Sequence[Timed]) -> float:
    return statistics.median(run.wall_s for run in runs)


def best_cpu(runs: Sequence[Timed]) -> float:
    return min(run.cpu_s for run in runs)


def commands(spec: Path, api_url: str) -> list[tuple[str, ...]]:
    api_call = ("job", "show", "j00000001", "--output", "json", "--server", api_url)
    return [("--help",), ("validate", str(spec)), ("plan", str(spec)), (*api_call, "--token", "x")]


@contextmanager
def stand_in_api() -> Iterator[str]:
    """A server that answers every GET at once with one job's JSON; its URL."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"id": "j00000001", "tenant": "acme", "state": "queued"}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _environment(tree: Path) -> dict[str, str]:
    return inherited_environment() | {
        "PYTHONPATH": f"{tree / 'src'}{os.pathsep}{tree}",
        "COLUMNS": "100",
    }


def run_once(tree: Path, command: Sequence[str]) -> tuple[Timed, str]:
    """`gpuplex COMMAND` with `tree`'s gpuplex: its wall and CPU time, and what it printed."""
    environment = _environment(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(  # noqa: S603 - this interpreter, gpuplex's own command
        [sys.executable, "-m", "gpuplex.cli", *command],
        cwd=tree,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(
            f"{tree}: gpuplex {' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}"
        )
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(wall_s, cpu_s), done.stdout


def measure(before_tree: Path, spec: Path, api_url: str, runs: int, console: Console) -> list[Row]:
    rows = [Row(command) for command in commands(spec, api_url)]
    for row in rows:  # untimed: writes each tree's .pyc files; both must print the same
        _, printed_before = run_once(before_tree, row.command)
        _, printed_after = run_once(ROOT, row.command)
        if printed_before != printed_after:
            console.print(f"[yellow]note[/]: {row.name} prints differently before and after")
    for number in range(runs):
        order = [(True, before_tree), (False, ROOT)]
        if number % 2:
            order.reverse()
        for row in rows:
            for is_before, tree in order:
                timed, _ = run_once(tree, row.command)
                (row.before if is_before else row.after).append(timed)
    return rows


def table(rows: Sequence[Row], runs: int) -> Table:
    result = Table(
        title=f"gpuplex start-up: wall and CPU seconds, {runs} runs of each command per tree"
    )
    for name in (
        "command",
        "before best",
        "before median",
        "after best",
        "after median",
        "ratio",
        f"≤ {TARGET_S} s",
        "CPU before",
        "CPU after",
        "CPU ratio",
    ):
        result.add_column(name, justify="left" if name == "command" else "right")
    for row in rows:
        before, after = best_wall(row.before), best_wall(row.after)
        cpu_before, cpu_after = best_cpu(row.before), best_cpu(row.after)
        result.add_row(
            row.name,
            f"{before:.3f}",
            f"{median_wall(row.before):.3f}",
            f"{after:.3f}",
            f"{median_wall(row.after):.3f}",
            f"{after / before:.2f}",
            "yes" if after <= TARGET_S else "no",
            f"{cpu_before:.3f}",
            f"{cpu_after:.3f}",
            f"{cpu_after / cpu_before:.2f}",
        )
    return result


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", default="HEAD", help="the git ref measured as before")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="timed runs per command")
    parser.add_argument("--spec", type=Path, default=LAPTOP, help="the spec validated and planned")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be 1 or more")
    console = Console(width=max(Console().width, 150))  # the table whole, in a log too
    spec = args.spec.resolve()
    host = machine()
    console.print(f"machine: {host.cpu}, {host.cores} cores, {host.python}, {host.platform}")
    console.print(f"before: {describe_ref(args.against)}", highlight=False)
    console.print(f"after:  {describe_working_tree(args.against)}", highlight=False)
    console.print(f"load average (1, 5, 15 min) at the start: {_load()}", highlight=False)
    with checkout(args.against) as before_tree, stand_in_api() as api_url:
        rows = measure(before_tree, spec, api_url, args.runs, console)
    console.print(table(rows, args.runs))
    console.print(f"load average at the end: {_load()}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
