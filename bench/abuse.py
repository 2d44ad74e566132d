"""Abuse benchmark: denial of service at the HTTP layer against a real `gpuplex gateway` (with a
simulated model server behind it) and a real `gpuplex server`, on loopback, with their default
front-door limits (gpuplex/http_guard.py, gpuplex/server/body_guard.py).

    make bench-abuse                        # about 90 s; or:
    .venv/bin/python bench/abuse.py [--quick] [--idle 2000] [--slowloris 1000]
                                    [--header-mib 400] [--body-mib 150] [--bodies 4] [--json FILE]

Each phase attacks both processes at once, from addresses of its own (127.0.1-4.x):
- idle: `--idle` connections to each that never send a byte;
- slowloris: `--slowloris` connections to each that send a request line, then a header line a
  second, never ending the head;
- header flood: `--header-mib` MiB of header lines sent to each, over as many connections as it
  takes, 8 at a time, each pushing until the server closes it;
- bodies: `--bodies` requests at once to each, declaring a `--body-mib` MiB body with no credentials
  (POST /v1/chat/completions, POST /api/v1/tokens) and sending it until the server closes;
- all at once: every attack above together.

Throughout, a probe tenant (from 127.0.0.2, its own connection kept alive) sends a chat completion
to the gateway and a token-authenticated GET /api/v1/tenants to the control plane every 50 ms. The
baseline is the probe with no attack, in the same run. Each process's RSS is sampled every 10 ms:
its growth is the phase's peak over its RSS when the phase began (target < 64 MiB), and the probe's
p99 is compared with the baseline's (target < 50 ms). On a 2-core machine the attackers, the probe
and the servers share the CPUs: the probe's latency includes that contention.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file, Python puts bench/ on sys.path rather than the project root (see bench/planner.py).
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as EventType
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from tests.abuse.front_door import Target, start_control_plane
from tests.e2e.gateway.stack import Stack, cannot_run_gateway, stop

from bench.abuse_attacks import Held, Sent, body_flood, header_flood, hold, open_many
from bench.planner_measure import machine
from gpuplex.server.run import HTTP_LIMITS

MIB = 1024 * 1024
MAX_GROWTH_MIB = 64
MAX_P99_MS = 50.0
PROBE_EVERY_S = 0.05
PROBE_SOURCE = "127.0.0.2"

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: acme-chat, port: {sim_port}}
gateway:
  port: {gateway_port}
  header_timeout_s: {header_timeout_s}
"""


def one_tenant_spec(sim_port: int, model: str, header_timeout_s: float = 10.0) -> str:
    """The benchmarks' gateway spec: tenant acme, one model on the simulated server at
    `sim_port`; `{gateway_port}` is left for `Stack.gateway` to fill in."""
    spec = SPEC.replace("{sim_port}", str(sim_port)).replace("acme-chat", model)
    return spec.replace("{header_timeout_s}", f"{header_timeout_s:g}")


CHAT = {"model": "acme-chat", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}


@dataclass(frozen=True)
class Options:
    idle: int = 2000
    slowloris: int = 1000
    header_mib: int = 400
    body_mib: int = 150
    bodies: int = 4
    baseline_s: float = 5.0
    min_phase_s: float = 8.0  # a flood is repeated for at least this long
    header_timeout_s: float = 10.0  # the gateway's default; the control plane's is the same


@dataclass(frozen=True)
class ProbeCall:
    method: str
    url: str
    headers: dict[str, str]
    body: dict[str, Any] | None = None


def _probe_loop(call: ProbeCall, stopping: EventType, out: Connection) -> None:
    """In a process of its own (no GIL shared with the attackers): one request every
    `PROBE_EVERY_S` on a kept-alive connection; at the end, every (when, ms, status)."""
    samples: list[tuple[float, float, int]] = []
    transport = httpx.HTTPTransport(local_address=PROBE_SOURCE)
    with httpx.Client(transport=transport, timeout=10) as client:
        while not stopping.is_set():
            started = time.monotonic()  # CLOCK_MONOTONIC: the same clock in every process
            try:
                reply = client.request(call.method, call.url, headers=call.headers, json=call.body)
                status = reply.status_code
            except httpx.HTTPError:
                status = 0
            ended = time.monotonic()
            samples.append((started, (ended - started) * 1000, status))
            stopping.wait(max(0.0, PROBE_EVERY_S - (ended - started)))
    out.send(samples)


class Probe:
    """The probe tenant's requests to one process, timed from a process of their own."""

    def __init__(self, call: ProbeCall) -> None:
        context = multiprocessing.get_context("spawn")
        self.stopping = context.Event()
        self._results, sender = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_probe_loop, args=(call, self.stopping, sender), daemon=True
        )
        self.samples: list[tuple[float, float, int]] = []

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.stopping.set()
        self.samples = self._results.recv()
        self.process.join(10)

    def window(self, start: float, end: float) -> tuple[float, float, int, int]:
        """p50 and p99 (ms) of the answered requests started in [start, end); their count and
        how many failed."""
        inside = [(ms, status) for at, ms, status in self.samples if start <= at < end]
        good = sorted(ms for ms, status in inside if status == 200)
        if not good:
            return float("nan"), float("nan"), 0, len(inside)
        return _pct(good, 50), _pct(good, 99), len(good), len(inside) - len(good)


def _pct(ordered: list[float], pct: int) -> float:
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


class RssSampler(threading.Thread):
    def __init__(self, targets: Sequence[Target]) -> None:
        super().__init__(daemon=True)
        self.targets = targets
        self.samples: list[tuple[float, list[float]]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.01):
            self.samples.append((time.monotonic(), [t.rss_mib() for t in self.targets]))

    def growth(self, index: int, start: float, end: float) -> tuple[float, float]:
        """(peak, at the end) over the RSS at `start`, in MiB."""
        inside = [rss[index] for at, rss in self.samples if start <= at <= end]
        before = [rss[index] for at, rss in self.samples if at <= start] or inside[:1]
        base = before[-1]
        return max(inside) - base, inside[-1] - base


@dataclass
class Phase:
    name: str
    start: float
    end: float
    outcome: dict[str, str] = field(default_factory=dict)  # target name -> what happened


def _both(attack: Callable[[Target], str], targets: Sequence[Target]) -> dict[str, str]:
    """Run `attack` against every target at once; each one's outcome."""
    outcomes: dict[str, str] = {}

    def one(target: Target) -> None:
        outcomes[target.name] = attack(target)

    threads = [threading.Thread(target=one, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _held(what: str, result: Held) -> str:
    refused = f", {result.refused_at_once} refused at once" if result.refused_at_once else ""
    left = f", [red]{result.still_open} still open[/]" if result.still_open else ""
    answered = f", {result.answered_408} got 408" if result.answered_408 else ""
    return f"{result.opened} {what}{refused}{answered}; closed: {result.closed_by_s()}{left}"


def _sent(result: Sent, what: str) -> str:
    answers = sorted(result.answered_ms or [])
    first = f"answered in ≤ {answers[-1]:.0f} ms" if answers else "[red]no answer[/]"
    statuses = ", ".join(f"{n}x {s or 'none'}" for s, n in sorted((result.statuses or {}).items()))
    return (
        f"{result.sent_bytes / MIB:,.0f} MiB {what} sent over {result.connections} connections "
        f"({result.most_taken_mib():.1f} MiB each, most never read: kernel buffers); "
        f"{statuses}; {first}"
    )


class Attacks:
    def __init__(self, options: Options) -> None:
        self.o = options
        # the control plane's header timeout is its default (gpuplex.server.run.HTTP_LIMITS)
        self.deadline_s = max(options.header_timeout_s, HTTP_LIMITS.header_timeout_s) + 3

    def idle(self, target: Target) -> str:
        sources = [f"127.0.1.{n}" for n in range(1, 9)]
        return _held("idle", hold(open_many(target.port, self.o.idle, sources), self.deadline_s))

    def slowloris(self, target: Target) -> str:
        sources = [f"127.0.2.{n}" for n in range(1, 5)]
        sockets = open_many(target.port, self.o.slowloris, sources)
        for sock in sockets:
            sock.send(b"GET / HTTP/1.1\r\nhost: victim\r\n")
        result = hold(sockets, self.deadline_s, lambda sock: sock.send(b"x-slow: 1\r\n"))
        return _held("slowloris", result)

    def header_flood(self, target: Target) -> str:
        sources = [f"127.0.3.{n}" for n in range(1, 9)]
        result = header_flood(target.port, self.o.header_mib * MIB, 8, sources, self.o.min_phase_s)
        return _sent(result, "of headers")

    def bodies(self, target: Target) -> str:
        sources = [f"127.0.4.{n}" for n in range(1, 5)]
        body = self.o.body_mib * MIB
        result = body_flood(
            target.port, target.post_path, body, self.o.bodies, sources, self.o.min_phase_s
        )
        return _sent(result, "of body")

    def all_at_once(self, target: Target) -> str:
        outcomes: list[str] = []
        attacks = (self.idle, self.slowloris, self.header_flood, self.bodies)
        threads = [threading.Thread(target=lambda a=a: outcomes.append(a(target))) for a in attacks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return " | ".join(outcomes)


def run(options: Options, console: Console, status: Console) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="gpuplex-bench-abuse-"))
    directory.chmod(0o755)
    stack = Stack(directory, f"sqlite:///{directory / 'gpuplex.db'}")
    server = None
    try:
        status.print("starting the simulated model server, the gateway and the control plane")
        sim_port = stack.sim(["acme-chat"])
        spec = one_tenant_spec(sim_port, "acme-chat", options.header_timeout_s)
        gateway = stack.gateway(spec)
        spec_path = directory / "server-spec.yaml"
        spec_path.write_text(spec.replace("{gateway_port}", str(gateway.port)))
        server, server_port, admin = start_control_plane(directory, spec_path)
        key = stack.key("acme")
        assert gateway.process is not None
        targets = [
            Target("gateway", gateway.port, gateway.process.pid, "/health", "/v1/chat/completions"),
            Target("control plane", server_port, server.pid, "/healthz", "/api/v1/tokens"),
        ]
        return _measure(options, targets, key, admin, console, status)
    finally:
        if server is not None:
            stop(server)
        stack.close()
        shutil.rmtree(directory, ignore_errors=True)


def _measure(
    options: Options,
    targets: list[Target],
    key: str,
    admin: str,
    console: Console,
    status: Console,
) -> dict[str, Any]:
    gateway, control = targets
    gateway_url = f"http://127.0.0.1:{gateway.port}/v1/chat/completions"
    control_url = f"http://127.0.0.1:{control.port}/api/v1/tenants"
    probes = [
        Probe(ProbeCall("POST", gateway_url, _bearer(key), CHAT)),
        Probe(ProbeCall("GET", control_url, _bearer(admin))),
    ]
    sampler = RssSampler(targets)
    for probe in probes:
        probe.start()
    sampler.start()
    time.sleep(2.0)  # the probes' processes start
    attacks = Attacks(options)
    phases: list[Phase] = []
    plan: list[tuple[str, Callable[[Target], str] | None]] = [
        ("baseline (no attack)", None),
        (f"{options.idle:,} idle connections each", attacks.idle),
        (f"{options.slowloris:,} slowloris connections each", attacks.slowloris),
        (f"{options.header_mib} MiB of header lines each", attacks.header_flood),
        (f"{options.bodies} x {options.body_mib} MiB bodies, no credentials, each", attacks.bodies),
        ("all of the above at once", attacks.all_at_once),
    ]
    try:
        for name, attack in plan:
            status.print(f"phase: {name}")
            time.sleep(1.0)  # what the last phase left behind settles
            start = time.monotonic()
            if attack is None:
                time.sleep(options.baseline_s)
                outcome = {t.name: "-" for t in targets}
            else:
                outcome = _both(attack, targets)
            phases.append(Phase(name, start, time.monotonic(), outcome))
    finally:
        for probe in probes:
            probe.stop()
        sampler.stopping.set()
        sampler.join()
    return _report(phases, targets, probes, sampler, console)


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _report(
    phases: list[Phase],
    targets: list[Target],
    probes: list[Probe],
    sampler: RssSampler,
    console: Console,
) -> dict[str, Any]:
    base = phases[0]
    rows: list[dict[str, Any]] = []
    table = Table(title="Probe latency and memory under attack (both processes attacked at once)")
    table.add_column("phase")
    for target in targets:
        table.add_column(f"{target.name}\nRSS growth\npeak / end MiB", justify="right")
        table.add_column(f"{target.name}\nprobe p50 / p99 ms\n(p99 ÷ baseline)", justify="right")
    rss_ok = tenant_ok = True
    for phase in phases:
        cells = [phase.name]
        row: dict[str, Any] = {"phase": phase.name, "outcome": phase.outcome}
        for index, (target, probe) in enumerate(zip(targets, probes, strict=True)):
            peak, end = sampler.growth(index, phase.start, phase.end)
            p50, p99, answered, failed = probe.window(phase.start, phase.end)
            base_p99 = probe.window(base.start, base.end)[1]
            grew_ok = peak < MAX_GROWTH_MIB
            fast_ok = p99 < MAX_P99_MS and failed == 0
            rss_ok = rss_ok and grew_ok
            if target is targets[0]:  # the probe tenant's own path: the gateway
                tenant_ok = tenant_ok and fast_ok
            fails = f", {failed} failed" if failed else ""
            cells.append(f"{'' if grew_ok else '[red]'}{peak:.1f} / {end:.1f}")
            ratio = f"{p99 / base_p99:.2f}x"
            cells.append(f"{'' if fast_ok else '[red]'}{p50:.1f} / {p99:.1f} ({ratio}){fails}")
            row[target.name] = {
                "rss_growth_peak_mib": round(peak, 1),
                "rss_growth_end_mib": round(end, 1),
                "probe_p50_ms": round(p50, 2),
                "probe_p99_ms": round(p99, 2),
                "probe_p99_over_baseline": round(p99 / base_p99, 2),
                "probe_answered": answered,
                "probe_failed": failed,
            }
        table.add_row(*cells)
        rows.append(row)
    console.print(table)
    outcomes = Table(title="What each attack got")
    outcomes.add_column("phase")
    outcomes.add_column("target")
    outcomes.add_column("outcome")
    for phase in phases[1:]:
        for target in targets:
            outcomes.add_row(phase.name, target.name, phase.outcome[target.name])
    console.print(outcomes)
    for good, claim in (
        (rss_ok, f"in every phase, each process's RSS grew < {MAX_GROWTH_MIB} MiB"),
        (
            tenant_ok,
            f"in every phase, the probe tenant's requests through the gateway kept p99 < "
            f"{MAX_P99_MS:g} ms, none failed",
        ),
    ):
        console.print(f"{'[green]PASS[/]' if good else '[red]FAIL[/]'}: {claim}")
    console.print(
        "(the control plane's probe, an admin's GET /api/v1/tenants on SQLite, is shown for "
        "information: it is no tenant's request path)"
    )
    ok = rss_ok and tenant_ok
    return {"phases": rows, "pass": ok}


def parse_options(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    d = Options()
    add = parser.add_argument
    add("--quick", action="store_true", help="a tenth of each attack, 2 s timeouts: a smoke test")
    add("--idle", type=int, default=d.idle, help="idle connections to each process")
    add("--slowloris", type=int, default=d.slowloris, help="slowloris connections to each")
    add("--header-mib", type=int, default=d.header_mib, help="MiB of header lines to each")
    add("--body-mib", type=int, default=d.body_mib, help="MiB each body declares and sends")
    add("--bodies", type=int, default=d.bodies, help="bodies at once to each process")
    add("--json", type=Path, default=None, metavar="FILE", help="also write the numbers here")
    args = parser.parse_args(argv)
    scale = 10 if args.quick else 1
    options = Options(
        idle=args.idle // scale,
        slowloris=args.slowloris // scale,
        header_mib=args.header_mib // scale,
        body_mib=args.body_mib // scale,
        bodies=args.bodies,
        baseline_s=2.0 if args.quick else d.baseline_s,
        min_phase_s=2.0 if args.quick else d.min_phase_s,
        header_timeout_s=2.0 if args.quick else d.header_timeout_s,
    )
    return options, args


def raise_file_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main(argv: Sequence[str] | None = None) -> int:
    options, args = parse_options(argv)
    console = Console() if sys.stdout.isatty() else Console(width=200)
    status = Console(stderr=True)
    why_not = cannot_run_gateway()
    if why_not:
        status.print(f"cannot run the gateway: {why_not}")
        return 1
    needed = 2 * (options.idle + options.slowloris) + 512
    if raise_file_limit() < needed:
        status.print(f"the file limit is under the {needed} sockets this needs: ulimit -n {needed}")
        return 1
    host = machine()
    started_load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    console.print(
        f"[bold]Abuse benchmark[/] on {host.cores} cores ({host.cpu}), {host.python}; "
        f"load average {started_load}; options: {vars(options)}"
    )
    try:
        results = run(options, console, status)
    except KeyboardInterrupt:
        status.print("interrupted: every process this benchmark started is stopped")
        return 130
    ended_load = " ".join(f"{n:.2f}" for n in os.getloadavg())
    console.print(f"load average at the end: {ended_load} (other work on the machine adds noise)")
    if args.json:
        args.json.write_text(json.dumps(results | {"options": vars(options)}, indent=2) + "\n")
        console.print(f"numbers written to {args.json}")
    return 0 if results["pass"] else 2


if __name__ == "__main__":
    sys.exit(main())
