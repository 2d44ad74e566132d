"""Gateway benchmark: the gpuplex gateway's throughput and added latency against nginx as a plain
reverse proxy on the same backend, and the comparison that chose its HTTP server and client.

    make bench-gateway                      # ~5.5 minutes; or:
    .venv/bin/python bench/gateway.py [--quick] [--duration-s 10] [--rate 1000]
                                      [--paced-connections 50] [--json FILE]
                                      [--redis-url redis://127.0.0.1:6379/0]

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
The rest lives beside this file: bench/gateway_load.py (wrk, both ways), bench/gateway_procs.py (the
processes), bench/gateway_report.py (rows, tables, JSON). Results are recorded in docs/benchmarks.md.
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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tests.e2e.gateway.stack import cannot_run_gateway

from bench.gateway_load import CLOSED, PACED, Load, chat_body, missing_tools, wrk
from bench.gateway_procs import (
    GatewaySetup,
    Processes,
    Running,
    redis_reachable,
)
from bench.gateway_report import (
    DIRECT,
    MODES,
    NGINX,
    STREAMING,
    Measured,
    Results,
    Section,
    print_footer,
    print_header,
    print_section,
)
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


class Bench:
    """Runs the setups in order, one process set at a time, advancing the progress display."""

    def __init__(self, options: Options, progress: Progress, results: Results) -> None:
        self.options = options
        self.progress = progress
        self.task = progress.add_task("starting", total=PLANNED_RUNS)
        self.results = results
        self.redis_problem = redis_reachable(options.redis_url)

    def say(self, text: str) -> None:
        self.progress.update(self.task, description=text)

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

    def start(self, label: str, runs: int, starter: Callable[[], Running]) -> Running | None:
        try:
            return starter()
        except RuntimeError as error:
            self.skip(label, runs, f"could not start: {error}")
            return None

    def skip(self, label: str, runs: int, why: str) -> None:
        self.results.notes.append(f"{label}: not measured: {why}")
        self.progress.console.print(f"[yellow]{label}: not measured: {why}[/]")
        self.progress.advance(self.task, runs)

    def measure(self, setup: str, url: str, key: str, tools: Sequence[str]) -> None:
        o = self.options
        self.say(f"{setup}: warming up")
        try:
            wrk(url, key, chat_body(False), o.connections, o.warmup_s)
        except RuntimeError as error:
            self.results.notes.append(f"{setup}: warm-up failed: {error}")
        for mode in MODES:
            body = chat_body(mode == STREAMING)
            for tool in tools:
                self.say(f"{setup} · {mode} · {tool}")
                time.sleep(o.pause_s)
                try:
                    if tool == CLOSED:
                        load = wrk(url, key, body, o.connections, o.duration_s)
                    else:
                        load = wrk(url, key, body, o.paced_connections, o.duration_s, o.rate_per_s)
                except RuntimeError as error:
                    self.results.notes.append(f"{setup} · {mode} · {tool}: failed: {error}")
                    self.progress.advance(self.task)
                    continue
                self.results.runs.append(Measured(setup, mode, load))
                self.report(setup, mode, load)
                self.progress.advance(self.task)

    def report(self, setup: str, mode: str, load: Load) -> None:
        errors = f", [red]{load.errors} errors: {load.error_detail}[/]" if load.errors else ""
        self.progress.console.print(
            f"  {setup} · {mode} · {load.tool}: {load.rate_per_s:,.0f} req/s, "
            f"p50 {load.p50_ms:.2f} ms, p99 {load.p99_ms:.2f} ms{errors}"
        )
        if load.tool == PACED and load.rate_per_s < 0.95 * self.options.rate_per_s:
            self.results.notes.append(
                f"{setup} · {mode}: paced load reached {load.rate_per_s:,.0f} req/s, not "
                f"{self.options.rate_per_s:,}: that row's latency is not at the target rate"
            )


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
    args = parser.parse_args(argv)
    duration = args.duration_s or (2.0 if args.quick else defaults.duration_s)
    if duration < 1 or args.connections < 1 or not 1 <= args.paced_connections <= args.rate:
        parser.error(
            "need --duration-s >= 1, --connections >= 1, 1 <= --paced-connections <= --rate"
        )
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
    print_footer(results, console)
    if args.json:
        args.json.write_text(json.dumps(results.as_json(SECTIONS), indent=2) + "\n")
        console.print(f"numbers written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
