"""`bench/gateway.py --vllm`, the results (bench/gateway_vllm.py runs them): every wrk run and every
one-at-a-time request as measured, the rows derived from them against vLLM direct in the same run,
the tables and the JSON."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.gateway_load import CLOSED, PACED, Load
from bench.gateway_procs import GatewaySetup
from bench.gateway_report import MODES

DIRECT = "vLLM direct"
PLAIN = GatewaySetup("gateway → vLLM (1 worker, no limits)", "plain")
FULL = GatewaySetup("gateway → vLLM, all features, 1 worker, memory", "full")
SETUPS = (DIRECT, PLAIN.label, FULL.label)
ROWS = [(mode, tool) for mode in MODES for tool in (CLOSED, PACED)]


@dataclass(frozen=True)
class VllmOptions:
    duration_s: float = 8.0
    rounds: int = 3
    connections: int = 4  # closed loop
    rate_per_s: int = 6  # paced
    paced_connections: int = 12  # each waits 2 s on average: about 5.7 req/s reached
    one_by_one: int = 100  # requests per setup and mode, one at a time
    warmup_s: float = 2.0
    pause_s: float = 0.5


@dataclass(frozen=True)
class VllmRun:
    """One wrk run of one setup: the load, and the CPU seconds its gateway (None for vLLM direct)
    and vLLM spent meanwhile."""

    setup: str
    mode: str
    round: int
    load: Load
    gateway_cpu_s: float | None
    vllm_cpu_s: float


@dataclass(frozen=True)
class VllmRow:
    setup: str
    mode: str
    rate_per_s: float | None
    rate_over_direct: float | None
    p50_ms: float | None
    p99_ms: float | None
    added_p50_ms: float | None
    added_p99_ms: float | None
    gateway_cpu_us: float | None  # per request, closed loop
    vllm_cpu_ms: float | None  # per request, closed loop
    errors: int


@dataclass(frozen=True)
class OneByOneRow:
    """One setup, one mode, one request at a time: its latencies' p50 and p99, and what it adds
    to vLLM direct: the median of the per-request differences, the difference of the p99s."""

    setup: str
    mode: str
    requests: int
    p50_ms: float
    p99_ms: float
    added_median_ms: float
    added_p99_ms: float


@dataclass
class VllmResults:
    options: VllmOptions
    machine: str
    load_average: str
    vllm_start_s: float = 0.0
    #: per gateway, CPU ms per second while no request runs
    idle_cpu_ms_per_s: dict[str, float] = field(default_factory=dict)
    runs: list[VllmRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    replies: dict[str, str] = field(default_factory=dict)
    #: mode: setup: the latency (ms) of each of its one-at-a-time requests, the i-th of every
    #: setup sent back to back
    one_by_one: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def _loads(self, setup: str, mode: str, tool: str) -> dict[int, VllmRun]:
        return {
            r.round: r
            for r in self.runs
            if (r.setup, r.mode, r.load.tool) == (setup, mode, tool) and r.load.requests
        }

    def row(self, setup: str, mode: str) -> VllmRow:
        closed, paced = self._loads(setup, mode, CLOSED), self._loads(setup, mode, PACED)
        direct_closed, direct_paced = self._loads(DIRECT, mode, CLOSED), self._loads(DIRECT, mode, PACED)  # fmt: skip
        requests = sum(r.load.requests for r in closed.values())
        gateway_cpu = [r.gateway_cpu_s for r in closed.values() if r.gateway_cpu_s is not None]
        vllm_cpu = sum(r.vllm_cpu_s for r in closed.values())
        return VllmRow(
            setup=setup,
            mode=mode,
            rate_per_s=_median([r.load.rate_per_s for r in closed.values()]),
            rate_over_direct=_paired(
                closed, direct_closed, lambda a, b: a.rate_per_s / b.rate_per_s
            ),
            p50_ms=_median([r.load.p50_ms for r in paced.values()]),
            p99_ms=_median([r.load.p99_ms for r in paced.values()]),
            added_p50_ms=_paired(paced, direct_paced, lambda a, b: a.p50_ms - b.p50_ms),
            added_p99_ms=_paired(paced, direct_paced, lambda a, b: a.p99_ms - b.p99_ms),
            gateway_cpu_us=sum(gateway_cpu) * 1e6 / requests if gateway_cpu and requests else None,
            vllm_cpu_ms=vllm_cpu * 1e3 / requests if requests else None,
            errors=sum(r.load.errors for r in self.runs if (r.setup, r.mode) == (setup, mode)),
        )

    def one_by_one_row(self, setup: str, mode: str) -> OneByOneRow | None:
        took = self.one_by_one.get(mode, {})
        mine, direct = took.get(setup, []), took.get(DIRECT, [])
        if len(mine) < 2 or len(mine) != len(direct):
            return None
        differences = [a - b for a, b in zip(mine, direct, strict=True)]
        return OneByOneRow(
            setup=setup,
            mode=mode,
            requests=len(mine),
            p50_ms=statistics.median(mine),
            p99_ms=_p99(mine),
            added_median_ms=statistics.median(differences),
            added_p99_ms=_p99(mine) - _p99(direct),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "options": asdict(self.options),
            "machine": self.machine,
            "load_average": self.load_average,
            "vllm_start_s": self.vllm_start_s,
            "idle_cpu_ms_per_s": self.idle_cpu_ms_per_s,
            "rows": [asdict(self.row(setup, mode)) for mode in MODES for setup in SETUPS],
            "runs": [asdict(run) for run in self.runs],
            "notes": self.notes,
            "replies": self.replies,
            "one_by_one_rows": [
                asdict(row)
                for mode in MODES
                for setup in SETUPS
                if (row := self.one_by_one_row(setup, mode)) is not None
            ],
            "one_by_one_ms": self.one_by_one,
        }


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _p99(values: list[float]) -> float:
    """The 99th percentile, interpolated between the two nearest (`statistics.quantiles`'s
    "inclusive" method: within the values measured)."""
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def _paired(
    runs: dict[int, VllmRun], baseline: dict[int, VllmRun], compare: Callable[[Load, Load], float]
) -> float | None:
    """The median over rounds of `compare(run, baseline's run of the same round)`."""
    return _median([compare(r.load, baseline[n].load) for n, r in runs.items() if n in baseline])


def _num(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def print_results(results: VllmResults, console: Console) -> None:
    o = results.options
    console.print(
        f"[bold]gpuplex gateway in front of a real vLLM[/]  machine: {results.machine} · load "
        f"average {results.load_average} · vLLM up in {results.vllm_start_s:g} s"
    )
    console.print(
        f"chat completions, max_tokens 16, temperature 0 · req/s: wrk closed loop, {o.connections} connections, "
        f"{o.duration_s:g} s · p50/p99: wrk paced at {o.rate_per_s} req/s over "
        f"{o.paced_connections} connections, {o.duration_s:g} s · medians over {o.rounds} rounds, "
        "each setup back to back within a round · added = the setup's percentile minus vLLM "
        "direct's in the same round · CPU per request: closed-loop runs, from /proc"
    )
    table = Table(title="Gateway in front of vLLM (CPU, tiny Llama)", title_justify="left")
    columns = ("setup", "mode", "req/s", "÷ direct", "p50 ms", "p99 ms", "added p50 ms",
               "added p99 ms", "gateway CPU µs/req", "vLLM CPU ms/req", "errors")  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name in ("setup", "mode") else "right")
    for mode in MODES:
        for setup in SETUPS:
            row = results.row(setup, mode)
            table.add_row(
                setup,
                mode,
                _num(row.rate_per_s),
                "—" if row.rate_over_direct is None else f"{row.rate_over_direct:.2f}x",
                _num(row.p50_ms),
                _num(row.p99_ms),
                _num(row.added_p50_ms, signed=True) if setup != DIRECT else "—",
                _num(row.added_p99_ms, signed=True) if setup != DIRECT else "—",
                _num(row.gateway_cpu_us, 0),
                _num(row.vllm_cpu_ms),
                f"[red]{row.errors:,}[/]" if row.errors else "0",
            )
        if mode != MODES[-1]:
            table.add_section()
    console.print(table)
    print_one_by_one(results, console)
    idle = ", ".join(f"{label}: {ms:g} ms/s" for label, ms in results.idle_cpu_ms_per_s.items())
    console.print(f"gateway CPU while idle, included in its CPU per request: {idle}")
    for note in results.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")


def print_one_by_one(results: VllmResults, console: Console) -> None:
    if not results.one_by_one:
        return
    table = Table(
        title="One request at a time (each setup's i-th right after the others')",
        title_justify="left",
        caption="added median: the median of the per-request differences from vLLM direct's; "
        "added p99: this setup's p99 minus vLLM direct's over the same requests",
    )
    for name in ("setup", "mode", "requests", "p50 ms", "p99 ms", "added median ms", "added p99 ms"):  # fmt: skip
        table.add_column(name, justify="left" if name in ("setup", "mode") else "right")
    for mode in MODES:
        for setup in SETUPS:
            row = results.one_by_one_row(setup, mode)
            if row is None:
                continue
            table.add_row(
                setup,
                mode,
                str(row.requests),
                _num(row.p50_ms),
                _num(row.p99_ms),
                _num(row.added_median_ms, signed=True) if setup != DIRECT else "—",
                _num(row.added_p99_ms, signed=True) if setup != DIRECT else "—",
            )
        if mode != MODES[-1]:
            table.add_section()
    console.print(table)
