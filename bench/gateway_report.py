"""Gateway benchmark, the results: every run as measured, the rows derived from them (req/s from
wrk's closed loop, p50/p99 from wrk paced at a fixed rate, added latency over the backend alone, ratios to nginx in the same run), the
rich tables and the JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.gateway_load import CLOSED, PACED, Load
from bench.planner_measure import Machine

NON_STREAMING = "non-streaming"
STREAMING = "streaming"
MODES = (NON_STREAMING, STREAMING)
DIRECT = "backend direct"
NGINX = "nginx → backend"
#: Below this (ms), nginx adds about nothing (noise between runs is larger): no ratio to it.
TOO_SMALL_MS = 0.05


@dataclass(frozen=True)
class Measured:
    setup: str
    mode: str
    load: Load


@dataclass(frozen=True)
class Row:
    setup: str
    mode: str
    rate_per_s: float | None  # closed loop
    p50_ms: float | None  # paced, at the fixed rate
    p99_ms: float | None
    added_p50_ms: float | None  # minus backend direct's, same mode
    added_p99_ms: float | None
    rate_over_nginx: float | None
    added_p50_over_nginx: float | None
    added_p99_over_nginx: float | None
    errors: int


@dataclass(frozen=True)
class Section:
    title: str
    setups: list[str]
    #: (what, setup, base): the caption gives setup's req/s over base's, in each mode
    comparisons: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class Results:
    machine: Machine
    load_average: str
    options: dict[str, Any]
    runs: list[Measured] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: dict[str, list[str]] = field(default_factory=dict)  # setup -> problem lines

    def get(self, setup: str, mode: str, tool: str) -> Load | None:
        for run in self.runs:
            if (run.setup, run.mode, run.load.tool) == (setup, mode, tool):
                return run.load
        return None

    def row(self, setup: str, mode: str) -> Row:
        closed, paced = self.get(setup, mode, CLOSED), self.get(setup, mode, PACED)
        direct, nginx = self.get(DIRECT, mode, PACED), self.get(NGINX, mode, PACED)
        nginx_rate = self.get(NGINX, mode, CLOSED)
        added_p50 = added_p99 = None
        if paced is not None and direct is not None and setup != DIRECT:
            added_p50, added_p99 = paced.p50_ms - direct.p50_ms, paced.p99_ms - direct.p99_ms
        nginx_p50 = nginx_p99 = None
        if nginx is not None and direct is not None:
            nginx_p50, nginx_p99 = nginx.p50_ms - direct.p50_ms, nginx.p99_ms - direct.p99_ms
        return Row(
            setup=setup,
            mode=mode,
            rate_per_s=closed.rate_per_s if closed else None,
            p50_ms=paced.p50_ms if paced else None,
            p99_ms=paced.p99_ms if paced else None,
            added_p50_ms=added_p50,
            added_p99_ms=added_p99,
            rate_over_nginx=_ratio(
                closed.rate_per_s if closed else None,
                nginx_rate.rate_per_s if nginx_rate else None,
            ),
            added_p50_over_nginx=_ratio(added_p50, nginx_p50, TOO_SMALL_MS),
            added_p99_over_nginx=_ratio(added_p99, nginx_p99, TOO_SMALL_MS),
            errors=sum(load.errors for load in (closed, paced) if load is not None),
        )

    def as_json(self, sections: list[Section]) -> dict[str, Any]:
        return {
            "machine": asdict(self.machine),
            "load_average": self.load_average,
            "options": self.options,
            "runs": [
                {"setup": run.setup, "mode": run.mode} | asdict(run.load) for run in self.runs
            ],
            "sections": [
                {
                    "title": section.title,
                    "caption": self.caption(section),
                    "rows": [asdict(self.row(s, m)) for s in section.setups for m in MODES],
                }
                for section in sections
            ],
            "notes": self.notes,
            "gateway_log_problems": self.logs,
        }

    def caption(self, section: Section) -> str:
        parts = []
        for what, setup, base in section.comparisons:
            ratios = [f"{rate_ratio(self, setup, base, mode)} {mode}" for mode in MODES]
            parts.append(f"{what} req/s: {', '.join(ratios)}")
        return "; ".join(parts)


def _ratio(value: float | None, base: float | None, at_least: float = 0.0) -> float | None:
    if value is None or base is None or base <= at_least:
        return None
    return value / base


def rate_ratio(results: Results, setup: str, base: str, mode: str) -> str:
    top, bottom = results.get(setup, mode, CLOSED), results.get(base, mode, CLOSED)
    ratio = _ratio(top.rate_per_s if top else None, bottom.rate_per_s if bottom else None)
    return "n/a" if ratio is None else f"{ratio:.2f}"


def _num(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+,.{digits}f}" if signed else f"{value:,.{digits}f}"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def print_header(results: Results, console: Console) -> None:
    m, o = results.machine, results.options
    paced = o["paced_connections"]
    console.print(
        f"[bold]gpuplex gateway benchmark[/]  machine: {m.cpu}, {m.cores} cores · {m.python} · "
        f"{m.platform} · load average at start {results.load_average}"
    )
    console.print(
        f"req/s: wrk, 1 thread, {o['connections']} connections, {o['duration_s']:g} s (closed loop, "
        f"the most it gets through) · p50/p99: wrk paced at {o['rate_per_s']:,} req/s, "
        f"{o['duration_s']:g} s, {paced} connections each waiting an exponential think time "
        f"(mean {1000 * paced / o['rate_per_s']:g} ms) before each request · added = the row's percentile "
        "minus the backend's alone, same mode · ratios are to nginx → backend in this same run "
        f"(— where nginx adds under {TOO_SMALL_MS} ms: no ratio to noise) · "
        "chat completions, max_tokens 16, streaming = 16 SSE chunks · load generator, proxies "
        "and backend share the CPUs"
    )


def print_section(results: Results, section: Section, console: Console) -> None:
    table = Table(title=section.title, title_justify="left", caption=results.caption(section))
    for name in ("setup", "mode", "req/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms"):
        table.add_column(name, justify="left" if name in ("setup", "mode") else "right")
    for name in ("req/s ÷ nginx", "added p50 ÷ nginx", "added p99 ÷ nginx", "errors"):
        table.add_column(name, justify="right")
    for mode in MODES:
        for setup in section.setups:
            row = results.row(setup, mode)
            table.add_row(
                setup,
                mode,
                _num(row.rate_per_s, 0),
                _num(row.p50_ms),
                _num(row.p99_ms),
                _num(row.added_p50_ms, signed=True),
                _num(row.added_p99_ms, signed=True),
                _times(row.rate_over_nginx),
                _times(row.added_p50_over_nginx),
                _times(row.added_p99_over_nginx),
                f"[red]{row.errors:,}[/]" if row.errors else "0",
            )
        if mode != MODES[-1]:
            table.add_section()
    console.print(table)


def print_footer(results: Results, console: Console) -> None:
    for note in results.notes:
        console.print(f"[yellow]note:[/] {note}")
    for setup, lines in results.logs.items():
        console.print(f"[yellow]{setup}: warnings and errors in its log[/]")
        if any("ASGI transport error" in line for line in lines):
            console.print(
                '  (granian\'s "ASGI transport error: Closed" is a client that closed its '
                "connection with a reply in flight, as wrk does when a run ends)"
            )
        for line in lines:
            console.print(f"  {line}", markup=False, highlight=False)
