"""Gateway benchmark: the gpuplex gateway's throughput and added latency against nginx as a plain
reverse proxy on the same backend, and the comparison that chose its HTTP server and client.

    make bench-gateway                      # ~5.5 minutes; or:
    .venv/bin/python bench/gateway.py [--quick] [--duration-s 10] [--rate 1000]
                                      [--paced-connections 50] [--json FILE]
                                      [--redis-url redis://127.0.0.1:6379/0]
                                      [--against REF [--rounds 2]]
    make bench-gateway ARGS="--against HEAD"   # this tree's gateway against HEAD's, ~4 minutes
    make bench-gateway ARGS="--vllm"           # in front of a real vLLM (make vllm), ~8 minutes

Needs `wrk` and `nginx` on the machine (`apt-get install wrk nginx`; the script checks), and Redis
at --redis-url for the 2-worker rows (skipped, with a note, without it). As root, the gateway runs
as nobody under /usr/bin/python3, as the end-to-end tests run it (`gpuplex gateway` refuses root).
`--quick` runs 2 s rows (about a minute): a smoke test, not numbers to record.

The backend is the simulated OpenAI server (`gpuplex sim model`, zero latency). Every setup is put
in front of it and measured twice, non-streaming chat (max_tokens 16) and streaming (16 SSE
chunks), by wrk in two ways (bench/gateway_load.py):
- closed loop, 1 thread, 64 connections: the most req/s the setup gets through;
- paced at 1,000 req/s: 50 connections, each waiting an exponential think time (mean 50 ms) before
  each request, so requests arrive spread out as independent clients' would: p50 and p99 latency.
  "Added" latency is the setup's percentile minus the backend's alone, in the same run; its ratio
  to nginx's added latency and req/s over nginx's req/s are the numbers to compare.

Sections:
1-2. backend direct, nginx -> backend (2 workers, keepalive 64, no buffering), and the gateway
     (1 worker, memory limiter, no rate limits);
3.   the gateway with every feature on: tenant and key rate limits (set high enough never to
     refuse), the fair queue (256 in flight, 4,096 waiting), metering to the spool and SQLite store,
     Prometheus metrics; 2 workers sharing limits in Redis, and 1 worker with limits in memory;
4.   the library choice: that 2-worker gateway under granian and under uvicorn; and the upstream
     client, aiohttp against httpx, through a minimal raw-ASGI proxy (bench/gateway_clients.py)
     served by granian with 1 worker (closed loop only).

On a 2-core machine the load generator, the proxy and the backend share the CPUs, so absolute
numbers are low; the baselines measured in the same run are what make the ratios meaningful.

`--against REF` (a git ref: HEAD, HEAD~1, a commit) measures instead the gateway of the working tree
(after) against the gateway of REF (before) in the same run, and nothing else (no nginx, no library
sections). REF is checked out in a temporary `git worktree` (removed at the end) and its gateway run
from its src/, on the same Python, packages and backend (the working tree's `gpuplex sim model`), so
only the gateway differs; each tree makes its own store and API keys with its own code. Compared:
"gateway → backend (1 worker, no limits)" and "all features, 1 worker, memory", non-streaming and
streaming, closed-loop req/s and paced p50/p99 added latency. In each of --rounds rounds (default
2) every row runs before and after back to back, in alternating order (A B, then B A), so the
machine's drift hits both trees alike. Rows default to 5 s here (--duration-s to change): 2 rounds
of 5 s take about 4 minutes, of 10 s about 7. The table gives before and after req/s (mean over
rounds), after ÷ before (each round's, and their median, which the verdict reads: a pair measured
back to back is what the drift of a shared machine's speed cancels out of, so the ratio of two
means over rounds that ran at different speeds is not), the latencies, and a verdict per row:
"within 10 %" when after ÷ before req/s is at least 0.90. A tree whose gateway cannot start (a spec or store it
cannot read) is reported with the end of its log.

`--vllm` measures instead the gateway in front of a real vLLM on CPU against vLLM called directly,
in the same run: added p50/p99 latency, under wrk and one request at a time, and the gateway's CPU
per request (bench/gateway_vllm.py, which takes its own options; needs `make vllm` and wrk, not
nginx).

The rest lives beside this file: bench/gateway_load.py (wrk, both ways), bench/gateway_procs.py (the
processes, the worktree), bench/gateway_report.py (rows, tables, JSON). Results are recorded in
docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file, Python puts bench/ on sys.path rather than the project root (see bench/planner.py).
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import FrameType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tests.e2e.gateway.stack import ROOT, cannot_run_gateway

from bench.gateway_load import CLOSED, PACED, Load, chat_body, missing_tools, probe, wrk
from bench.gateway_procs import (
    GatewaySetup,
    Processes,
    Running,
    Source,
    check_source,
    checkout,
    describe_ref,
    describe_working_tree,
    group_cpu_s,
    redis_reachable,
    tail_lines,
)
from bench.gateway_report import (
    AFTER,
    BEFORE,
    DIRECT,
    MODES,
    NGINX,
    STREAMING,
    Comparison,
    Measured,
    Results,
    Section,
    TreeRun,
    print_comparison,
    print_footer,
    print_header,
    print_section,
)
from bench.gateway_vllm import main as against_vllm
from bench.planner_measure import machine

PLAIN = GatewaySetup("gateway → backend (1 worker, no limits)", "plain")
FULL_MEMORY = GatewaySetup("gateway, all features, 1 worker, memory", "full")
FULL_REDIS = GatewaySetup("gateway, all features, 2 workers, redis", "full", 2, "redis")
FULL_GRANIAN = GatewaySetup(
    "gateway, all features, 2 workers, redis, on granian", "full", 2, "redis", "granian"
)
GATEWAYS = (PLAIN, FULL_MEMORY, FULL_REDIS, FULL_GRANIAN)
AIOHTTP = "minimal proxy, aiohttp client"
HTTPX = "minimal proxy, httpx client"
#: 2 modes x (closed + paced) for the backend, nginx and each gateway; 2 modes x closed per client
PLANNED_RUNS = 4 * (2 + len(GATEWAYS)) + 2 * 2
#: --against: the setups compared before/after, and each one's rows, in the order they run
COMPARED = (PLAIN, FULL_MEMORY)
COMPARED_ROWS = [(mode, tool) for mode in MODES for tool in (CLOSED, PACED)]
COMPARE_DURATION_S = 5.0
COMPARE_ROUNDS = 2


def compare_runs(rounds: int) -> int:
    """The backend's 4 runs, then each compared setup's rows, before and after, in each round."""
    return 2 * 2 + len(COMPARED) * rounds * len(COMPARED_ROWS) * 2


SECTIONS = [
    Section("1-2. Reverse proxies over the same backend", [DIRECT, NGINX, PLAIN.label]),
    Section(
        "3. The gateway with every feature on",
        [NGINX, PLAIN.label, FULL_MEMORY.label, FULL_REDIS.label],
        [("2 workers redis ÷ 1 worker memory", FULL_REDIS.label, FULL_MEMORY.label)],
    ),
    Section(
        "4a. HTTP server for the gateway: uvicorn (the default) or granian",
        [NGINX, FULL_REDIS.label, FULL_GRANIAN.label],
        [("uvicorn ÷ granian", FULL_REDIS.label, FULL_GRANIAN.label)],
    ),
    Section(
        "4b. Upstream client: a minimal proxy on granian with aiohttp or httpx (closed loop only)",
        [NGINX, AIOHTTP, HTTPX],
        [("httpx ÷ aiohttp", HTTPX, AIOHTTP)],
    ),
]


@dataclass(frozen=True)
class Options:
    duration_s: float = 10.0
    warmup_s: float = 2.0
    pause_s: float = 0.5  # between runs, for connections to close
    connections: int = 64
    rate_per_s: int = 1000
    paced_connections: int = 100  # each waits connections / rate_per_s s on average
    redis_url: str = "redis://127.0.0.1:6379/0"


class Runner:
    """What the benchmark and the comparison share: one wrk run at a time, the progress display,
    and the notes to print under the tables."""

    def __init__(self, options: Options, progress: Progress, planned: int, notes: list[str]):
        self.options = options
        self.progress = progress
        self.task = progress.add_task("starting", total=planned)
        self.notes = notes
        #: None: a note for each paced run short of the rate; a list: their rates, for one note
        self.short_paced: list[float] | None = None

    def say(self, text: str) -> None:
        self.progress.update(self.task, description=text)

    def start(self, label: str, runs: int, starter: Callable[[], Running]) -> Running | None:
        try:
            return starter()
        except RuntimeError as error:
            self.skip(label, runs, f"could not start: {error}")
            return None

    def skip(self, label: str, runs: int, why: str) -> None:
        self.notes.append(f"{label}: not measured: {why}")
        self.progress.console.print(f"[yellow]{escape(label)}: not measured: {escape(why)}[/]")
        self.progress.advance(self.task, runs)

    def warm_up(self, setup: str, url: str, key: str) -> None:
        self.say(f"{setup}: warming up")
        try:
            wrk(url, key, chat_body(False), self.options.connections, self.options.warmup_s)
        except RuntimeError as error:
            self.notes.append(f"{setup}: warm-up failed: {error}")

    def one(self, setup: str, url: str, key: str, mode: str, tool: str) -> Load | None:
        """One wrk run (CLOSED or PACED) of `mode`, reported; None, with a note, when it failed."""
        o = self.options
        body = chat_body(mode == STREAMING)
        self.say(f"{setup} · {mode} · {tool}")
        time.sleep(o.pause_s)
        try:
            if tool == CLOSED:
                load = wrk(url, key, body, o.connections, o.duration_s)
            else:
                load = wrk(url, key, body, o.paced_connections, o.duration_s, o.rate_per_s)
        except RuntimeError as error:
            self.notes.append(f"{setup} · {mode} · {tool}: failed: {error}")
            self.progress.advance(self.task)
            return None
        self.report(setup, mode, load)
        self.progress.advance(self.task)
        return load

    def report(self, setup: str, mode: str, load: Load) -> None:
        errors = f", [red]{load.errors} errors: {load.error_detail}[/]" if load.errors else ""
        self.progress.console.print(
            f"  {setup} · {mode} · {load.tool}: {load.rate_per_s:,.0f} req/s, "
            f"p50 {load.p50_ms:.2f} ms, p99 {load.p99_ms:.2f} ms{errors}"
        )
        if load.tool == PACED and load.rate_per_s < 0.95 * self.options.rate_per_s:
            if self.short_paced is not None:
                self.short_paced.append(load.rate_per_s)
                return
            self.notes.append(
                f"{setup} · {mode}: paced load reached {load.rate_per_s:,.0f} req/s, not "
                f"{self.options.rate_per_s:,}: that row's latency is not at the target rate"
            )


class Bench(Runner):
    """Runs the setups in order, one process set at a time, advancing the progress display."""

    def __init__(self, options: Options, progress: Progress, results: Results) -> None:
        super().__init__(options, progress, PLANNED_RUNS, results.notes)
        self.results = results
        self.redis_problem = redis_reachable(options.redis_url)

    def run(self, procs: Processes) -> None:
        keys = procs.keys()
        self.say("starting the backend")
        backend = procs.backend()
        backend_port = int(backend.url.rsplit(":", 1)[1])
        self.measure(DIRECT, backend.url, keys["plain"], (CLOSED, PACED))
        self.say("starting nginx")
        nginx = procs.nginx(backend_port)
        self.measure(NGINX, nginx.url, keys["plain"], (CLOSED, PACED))
        procs.stop(nginx)
        for setup in GATEWAYS:
            if setup.limiter == "redis" and self.redis_problem:
                self.skip(setup.label, 4, f"no Redis at {self.options.redis_url}")
                continue
            self.say(f"starting {setup.label}")
            key = keys[setup.tenant]
            starter = partial(procs.gateway, setup, backend_port, key, self.options.redis_url)
            started = self.start(setup.label, 4, starter)
            if started is None:
                continue
            self.measure(setup.label, started.url, key, (CLOSED, PACED))
            problems = started.log_problems()
            if problems:
                self.results.logs[setup.label] = problems
            procs.stop(started)
        for label, client in ((AIOHTTP, "aiohttp"), (HTTPX, "httpx")):
            self.say(f"starting {label}")
            started = self.start(label, 2, partial(procs.client_proxy, client, backend.url))
            if started is not None:
                self.measure(label, started.url, keys["plain"], (CLOSED,))
                procs.stop(started)
        self.say("done")

    def measure(self, setup: str, url: str, key: str, tools: Sequence[str]) -> None:
        self.warm_up(setup, url, key)
        for mode in MODES:
            for tool in tools:
                load = self.one(setup, url, key, mode, tool)
                if load is not None:
                    self.results.runs.append(Measured(setup, mode, load))


class Compare(Runner):
    """--against: the backend alone, then each compared setup with both trees' gateways running,
    every row measured before and after back to back, in alternating order, round after round."""

    def __init__(
        self,
        options: Options,
        progress: Progress,
        comparison: Comparison,
        sources: tuple[Source, Source],
        rounds: int,
    ) -> None:
        super().__init__(options, progress, compare_runs(rounds), comparison.notes)
        self.comparison = comparison
        self.sources = sources
        self.rounds = rounds
        self.short_paced = []

    def run(self, procs: Processes) -> None:
        """Raises RuntimeError when a tree's gateway cannot be run at all (its code unreadable to
        the gateway's user, or its store unmade by its own code)."""
        self.say("checking both trees")
        for source in self.sources:
            check_source(source)
        keys = {source.name: procs.keys_for(source) for source in self.sources}
        self.say("starting the backend")
        backend = procs.backend()
        backend_port = int(backend.url.rsplit(":", 1)[1])
        checked = [s.name for s in self.sources if procs.publish_identity(s, backend_port)]
        if checked:
            self.notes.append(
                f"{' and '.join(checked)}: the backend's identity is published in the store, so "
                "the gateway checks who answers each new connection to it (once per connection)"
            )
        any_key = keys[AFTER]["plain"]  # the backend takes any
        self.warm_up(DIRECT, backend.url, any_key)
        for mode, tool in COMPARED_ROWS:
            load = self.one(DIRECT, backend.url, any_key, mode, tool)
            if load is not None:
                self.comparison.direct.append(Measured(DIRECT, mode, load))
        for setup in COMPARED:
            self.compare(procs, setup, backend_port, keys)
        self.say("done")
        if self.short_paced:
            paced = sum(1 for r in self.comparison.runs if r.load.tool == PACED) + sum(
                1 for r in self.comparison.direct if r.load.tool == PACED
            )
            self.notes.append(
                f"{len(self.short_paced)} of {paced} paced runs reached under 95 % of "
                f"{self.options.rate_per_s:,} req/s (lowest {min(self.short_paced):,.0f}): their "
                "latency is not at the target rate (the machine is busy, or --rate is above what "
                "the setup serves)"
            )

    def compare(
        self,
        procs: Processes,
        setup: GatewaySetup,
        backend_port: int,
        keys: dict[str, dict[str, str]],
    ) -> None:
        started: dict[str, Running] = {}
        for source in self.sources:
            self.say(f"starting {setup.label} · {source.name}")
            key = keys[source.name][setup.tenant]
            starter = partial(
                procs.gateway, setup, backend_port, key, self.options.redis_url, source
            )
            try:
                started[source.name] = starter()
            except RuntimeError as error:
                self.notes.append(
                    f"{setup.label} · {source.name} ({source.label}): its gateway could not start "
                    f"(the end of its log follows):\n{tail_lines(str(error))}"
                )
        runs = self.rounds * len(COMPARED_ROWS) * 2
        if len(started) < len(self.sources):
            failed = [s.name for s in self.sources if s.name not in started]
            self.skip(setup.label, runs, f"the {' and '.join(failed)} gateway did not start (see above)")  # fmt: skip
        else:
            for source in self.sources:
                key = keys[source.name][setup.tenant]
                said = probe(started[source.name].url, key)
                self.comparison.replies[f"{setup.label} · {source.name}"] = said
            got = [self.comparison.replies[f"{setup.label} · {s.name}"] for s in self.sources]
            if len(set(got)) > 1:
                self.notes.append(
                    f"{setup.label}: the two gateways' replies differ ("
                    + "; ".join(f"{s.name}: {g}" for s, g in zip(self.sources, got, strict=True))
                    + "): their req/s are not of the same work"
                )
            for source in self.sources:
                self.warm_up(f"{setup.label} · {source.name}", started[source.name].url, keys[source.name][setup.tenant])  # fmt: skip
            for round_ in range(self.rounds):
                for j, (mode, tool) in enumerate(COMPARED_ROWS):
                    order = self.sources if (round_ + j) % 2 == 0 else self.sources[::-1]
                    for source in order:
                        label = f"{setup.label} · {source.name}"
                        key = keys[source.name][setup.tenant]
                        group = started[source.name].process.pid
                        cpu_before = group_cpu_s(group)
                        load = self.one(label, started[source.name].url, key, mode, tool)
                        if load is not None:
                            cpu_us = None
                            if tool == CLOSED and load.requests:
                                spent_s = group_cpu_s(group) - cpu_before
                                cpu_us = spent_s * 1e6 / load.requests
                            run = TreeRun(setup.label, mode, source.name, round_, load, cpu_us)
                            self.comparison.runs.append(run)
        for name, running in started.items():
            problems = running.log_problems()
            if problems:
                self.comparison.logs[f"{setup.label} · {name}"] = problems
            procs.stop(running)


def parse_options(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    defaults = Options()
    add = parser.add_argument
    add("--quick", action="store_true", help="2 s rows, about a minute: a smoke test")
    add(
        "--duration-s", type=float, default=None, help=f"each row (default {defaults.duration_s:g})"
    )
    add("--connections", type=int, default=defaults.connections, help="wrk connections")
    add("--rate", type=int, default=defaults.rate_per_s, help="the paced load's req/s")
    add(
        "--paced-connections",
        type=int,
        default=defaults.paced_connections,
        help="connections of the paced load",
    )
    add("--redis-url", default=defaults.redis_url, help="for the 2-worker rows")
    add("--json", type=Path, default=None, metavar="FILE", help="also write the numbers here")
    add(
        "--against",
        default=None,
        metavar="REF",
        help="only compare the working tree's gateway with REF's (a git ref: HEAD, HEAD~1), "
        f"interleaved in the same run; rows default to {COMPARE_DURATION_S:g} s",
    )
    add(
        "--rounds",
        type=int,
        default=None,
        help=f"with --against: passes over every row, before and after (default {COMPARE_ROUNDS})",
    )
    add(
        "--vllm",
        action="store_true",
        help="only the gateway in front of a real vLLM against vLLM direct (make vllm first); "
        "its options: bench/gateway.py --vllm --help",
    )
    args = parser.parse_args(argv)
    if args.rounds is not None and args.against is None:
        parser.error("--rounds goes with --against")
    args.rounds = args.rounds or (1 if args.quick else COMPARE_ROUNDS)
    longest = COMPARE_DURATION_S if args.against else defaults.duration_s
    duration = args.duration_s or (2.0 if args.quick else longest)
    if duration < 1 or args.connections < 1 or not 1 <= args.paced_connections <= args.rate:
        parser.error(
            "need --duration-s >= 1, --connections >= 1, 1 <= --paced-connections <= --rate"
        )
    if args.rounds < 1:
        parser.error("need --rounds >= 1")
    options = Options(
        duration_s=duration,
        warmup_s=0.5 if args.quick else defaults.warmup_s,
        pause_s=0.2 if args.quick else defaults.pause_s,
        connections=args.connections,
        rate_per_s=args.rate,
        paced_connections=args.paced_connections,
        redis_url=args.redis_url,
    )
    return options, args


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: leave through the same `finally` as Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--vllm" in argv:
        signal.signal(signal.SIGTERM, _interrupted)
        return against_vllm([a for a in argv if a != "--vllm"])
    options, args = parse_options(argv)
    console = Console() if sys.stdout.isatty() else Console(width=220)
    status = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=220)
    missing = missing_tools()
    if missing:
        status.print(f"missing: {', '.join(missing)}; install them with: apt-get install wrk nginx")
        return 1
    why_not = cannot_run_gateway()
    if why_not:
        status.print(f"cannot run the gateway: {why_not}")
        return 1
    signal.signal(signal.SIGTERM, _interrupted)
    if args.against is not None:
        return compare(options, args, console, status)
    load_average = " ".join(f"{n:.2f}" for n in os.getloadavg())
    results = Results(machine(), load_average, vars(options) | {"quick": args.quick})
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())  # fmt: skip
    try:
        with Processes() as procs, Progress(*columns, console=status, transient=True) as progress:
            Bench(options, progress, results).run(procs)
    except KeyboardInterrupt:
        status.print("interrupted: every process this benchmark started is stopped")
        return 130
    results.load_average += " → at end " + " ".join(f"{n:.2f}" for n in os.getloadavg())
    print_header(results, console)
    for section in SECTIONS:
        print_section(results, section, console)
    print_footer(results.notes, results.logs, console)
    if args.json:
        args.json.write_text(json.dumps(results.as_json(SECTIONS), indent=2) + "\n")
        console.print(f"numbers written to {args.json}")
    return 0


def compare(options: Options, args: argparse.Namespace, console: Console, status: Console) -> int:
    """--against REF: the working tree's gateway against REF's, interleaved; the table, the
    verdicts, and --json."""
    ref: str = args.against
    try:
        before, after = describe_ref(ref), describe_working_tree(ref)
    except RuntimeError as error:
        status.print(f"--against {escape(ref)}: {escape(str(error))}")
        return 2
    load_average = " ".join(f"{n:.2f}" for n in os.getloadavg())
    settings = vars(options) | {"quick": args.quick, "rounds": args.rounds, "against": ref}
    labels = [setup.label for setup in COMPARED]
    comparison = Comparison(machine(), load_average, settings, before, after, labels)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())  # fmt: skip
    started = time.monotonic()
    try:
        with (
            checkout(ref) as tree,
            Processes() as procs,
            Progress(*columns, console=status, transient=True) as progress,
        ):
            sources = (Source(BEFORE, before, tree), Source(AFTER, "the working tree", ROOT))
            Compare(options, progress, comparison, sources, args.rounds).run(procs)
    except KeyboardInterrupt:
        status.print("interrupted: every process this benchmark started is stopped")
        return 130
    except RuntimeError as error:
        status.print(f"[red]cannot compare:[/] {escape(str(error))}")
        return 1
    comparison.load_average += " → at end " + " ".join(f"{n:.2f}" for n in os.getloadavg())
    comparison.options["wall_s"] = round(time.monotonic() - started)
    print_comparison(comparison, console)
    console.print(f"took {comparison.options['wall_s']} s")
    if args.json:
        args.json.write_text(json.dumps(comparison.as_json(), indent=2) + "\n")
        console.print(f"numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
