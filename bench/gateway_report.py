"""Gateway benchmark, the results: every run as measured, the rows derived from them (req/s from
wrk's closed loop, p50/p99 from wrk paced at a fixed rate, added latency over the backend alone, ratios to nginx in the same run), the
rich tables and the JSON; and for `--against REF`, the comparison of two trees' gateways
(`Comparison`: before = REF, after = the working tree, runs interleaved)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
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


def print_footer(notes: list[str], logs: dict[str, list[str]], console: Console) -> None:
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for setup, lines in logs.items():
        console.print(f"[yellow]{escape(setup)}: warnings and errors in its log[/]")
        if any("ASGI transport error" in line for line in lines):
            console.print(
                '  (granian\'s "ASGI transport error: Closed" is a client that closed its '
                "connection with a reply in flight, as wrk does when a run ends)"
            )
        for line in lines:
            console.print(f"  {line}", markup=False, highlight=False)


BEFORE = "before"  # TreeRun.tree: the gateway of REF
AFTER = "after"  # TreeRun.tree: the gateway of the working tree
#: after ÷ before req/s at or above this is "within 10 %" (a throughput regression of at most 10 %).
WITHIN = 0.90


@dataclass(frozen=True)
class TreeRun:
    """One run of one tree's gateway: `round` counts the passes over every row, each pass running
    before and after back to back for each row, in alternating order."""

    setup: str
    mode: str
    tree: str  # BEFORE or AFTER
    round: int
    load: Load
    #: closed loop: CPU seconds the gateway's processes used in the run, per request, in µs
    cpu_us_per_request: float | None = None


@dataclass(frozen=True)
class CompareRow:
    setup: str
    mode: str
    before_rate_per_s: float | None  # closed loop, mean over rounds
    after_rate_per_s: float | None
    #: after ÷ before: the median of `round_ratios` (each round's before and after ran back to
    #: back, so a drift of the machine's speed between rounds cancels out of each pair); with no
    #: whole round, the ratio of the means
    ratio: float | None
    round_ratios: list[float]  # after ÷ before in each round, the two measured back to back
    before_p50_ms: float | None  # paced, median over rounds
    after_p50_ms: float | None
    before_p99_ms: float | None
    after_p99_ms: float | None
    before_added_p50_ms: float | None  # minus the backend's alone, same mode
    after_added_p50_ms: float | None
    before_added_p99_ms: float | None
    after_added_p99_ms: float | None
    before_errors: int
    after_errors: int
    verdict: str
    before_cpu_us: float | None = None  # closed loop, CPU µs per request, mean over rounds
    after_cpu_us: float | None = None


@dataclass
class Comparison:
    machine: Machine
    load_average: str
    options: dict[str, Any]
    before: str  # what the before tree is (REF, its commit)
    after: str  # what the after tree is (the working tree)
    setups: list[str]
    direct: list[Measured] = field(default_factory=list)  # the backend alone
    runs: list[TreeRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    logs: dict[str, list[str]] = field(default_factory=dict)  # setup · tree -> problem lines
    replies: dict[str, str] = field(default_factory=dict)  # setup · tree -> what a request gets

    def loads(self, setup: str, mode: str, tree: str, tool: str) -> list[Load]:
        return [
            run.load
            for run in self.runs
            if (run.setup, run.mode, run.tree, run.load.tool) == (setup, mode, tree, tool)
        ]

    def direct_paced(self, mode: str) -> Load | None:
        for run in self.direct:
            if run.mode == mode and run.load.tool == PACED:
                return run.load
        return None

    def row(self, setup: str, mode: str) -> CompareRow:
        rates = {
            tree: _mean([x.rate_per_s for x in self.loads(setup, mode, tree, CLOSED)])
            for tree in (BEFORE, AFTER)
        }
        paced = {tree: self.loads(setup, mode, tree, PACED) for tree in (BEFORE, AFTER)}
        p50 = {tree: _median([x.p50_ms for x in paced[tree]]) for tree in paced}
        p99 = {tree: _median([x.p99_ms for x in paced[tree]]) for tree in paced}
        direct = self.direct_paced(mode)
        round_ratios = self.round_ratios(setup, mode)
        ratio = _median(round_ratios) or _ratio(rates[AFTER], rates[BEFORE])
        errors = {
            tree: sum(
                x.errors for tool in (CLOSED, PACED) for x in self.loads(setup, mode, tree, tool)
            )
            for tree in (BEFORE, AFTER)
        }
        return CompareRow(
            setup=setup,
            mode=mode,
            before_rate_per_s=rates[BEFORE],
            after_rate_per_s=rates[AFTER],
            ratio=ratio,
            round_ratios=round_ratios,
            before_p50_ms=p50[BEFORE],
            after_p50_ms=p50[AFTER],
            before_p99_ms=p99[BEFORE],
            after_p99_ms=p99[AFTER],
            before_added_p50_ms=_minus(p50[BEFORE], direct.p50_ms if direct else None),
            after_added_p50_ms=_minus(p50[AFTER], direct.p50_ms if direct else None),
            before_added_p99_ms=_minus(p99[BEFORE], direct.p99_ms if direct else None),
            after_added_p99_ms=_minus(p99[AFTER], direct.p99_ms if direct else None),
            before_errors=errors[BEFORE],
            after_errors=errors[AFTER],
            verdict=verdict(ratio, errors[BEFORE] + errors[AFTER]),
            before_cpu_us=self.cpu_us(setup, mode, BEFORE),
            after_cpu_us=self.cpu_us(setup, mode, AFTER),
        )

    def cpu_us(self, setup: str, mode: str, tree: str) -> float | None:
        """CPU µs per request of one tree's gateway, mean over its closed-loop runs: less moved
        by the machine's other work than req/s, since a busy machine slows both."""
        return _mean(
            [
                run.cpu_us_per_request
                for run in self.runs
                if (run.setup, run.mode, run.tree, run.load.tool) == (setup, mode, tree, CLOSED)
                and run.cpu_us_per_request is not None
            ]
        )

    def round_ratios(self, setup: str, mode: str) -> list[float]:
        by_round: dict[int, dict[str, float]] = {}
        for run in self.runs:
            if (run.setup, run.mode, run.load.tool) == (setup, mode, CLOSED):
                by_round.setdefault(run.round, {})[run.tree] = run.load.rate_per_s
        return [
            pair[AFTER] / pair[BEFORE]
            for _, pair in sorted(by_round.items())
            if pair.get(BEFORE) and AFTER in pair
        ]

    def rows(self) -> list[CompareRow]:
        return [self.row(setup, mode) for setup in self.setups for mode in MODES]

    def as_json(self) -> dict[str, Any]:
        return {
            "machine": asdict(self.machine),
            "load_average": self.load_average,
            "options": self.options,
            "before": self.before,
            "after": self.after,
            "backend_direct": [{"mode": r.mode} | asdict(r.load) for r in self.direct],
            "runs": [
                {"setup": r.setup, "mode": r.mode, "tree": r.tree, "round": r.round}
                | asdict(r.load)
                for r in self.runs
            ],
            "rows": [asdict(row) for row in self.rows()],
            "replies": self.replies,
            "notes": self.notes,
            "gateway_log_problems": self.logs,
        }


def verdict(ratio: float | None, errors: int) -> str:
    """ "within 10 %" when after's req/s is at least 90 % of before's, else "NOT within 10 %"."""
    if ratio is None:
        return "not compared: a tree's gateway was not measured (see the notes)"
    change = f"after is {100 * abs(ratio - 1):.0f} % {'faster' if ratio >= 1 else 'slower'}"
    said = f"within 10 % ({change})" if ratio >= WITHIN else f"NOT within 10 % ({change})"
    return said + (f"; {errors:,} errors: see the table" if errors else "")


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _minus(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None else value - base


def _pair(before: float | None, after: float | None, digits: int = 1, signed: bool = False) -> str:
    return f"{_num(before, digits, signed)} → {_num(after, digits, signed)}"


def _cpu_said(row: CompareRow) -> str:
    if row.before_cpu_us is None or row.after_cpu_us is None or not row.before_cpu_us:
        return ""
    return f" · CPU per request after ÷ before {row.after_cpu_us / row.before_cpu_us:.2f}"


def print_comparison(comparison: Comparison, console: Console) -> None:
    m, o = comparison.machine, comparison.options
    paced = o["paced_connections"]
    console.print(
        f"[bold]gpuplex gateway benchmark: before/after[/]  machine: {m.cpu}, {m.cores} cores · "
        f"{m.python} · {m.platform} · load average at start {comparison.load_average}"
    )
    console.print(f"before: {comparison.before}", markup=False, highlight=False)
    console.print(f"after:  {comparison.after}", markup=False, highlight=False)
    console.print(
        "both gateways run on the same Python and packages, against the same backend (the working "
        f"tree's `gpuplex sim model`) · {o['rounds']} round(s): in each, every row runs before "
        "and after back to back, in alternating order, so the machine's drift hits both · "
        f"req/s: wrk, 1 thread, {o['connections']} connections, {o['duration_s']:g} s, closed "
        "loop, mean over rounds · after ÷ before: the median of each round's ratio · p50/p99: "
        "wrk paced at "
        f"{o['rate_per_s']:,} req/s, {paced} connections, median over rounds; added = minus the "
        "backend's alone, same mode · chat completions, max_tokens 16, streaming = 16 SSE chunks"
    )
    direct = [
        f"{mode}: p50 {d.p50_ms:.2f} ms, p99 {d.p99_ms:.2f} ms"
        for mode in MODES
        if (d := comparison.direct_paced(mode)) is not None
    ]
    if direct:
        console.print(f"backend alone, paced: {'; '.join(direct)}")
    for setup in comparison.setups:
        got = {tree: comparison.replies.get(f"{setup} · {tree}") for tree in (BEFORE, AFTER)}
        if got[BEFORE] is not None and got[BEFORE] == got[AFTER]:
            said = f"both trees' gateways: {got[AFTER]}"
        else:
            said = f"before: {got[BEFORE]} · after: {got[AFTER]}  (they differ)"
        console.print(f"one request through {setup}: {said}", markup=False, highlight=False)
    table = Table(
        title="The gateway before (REF) → after (working tree)",
        title_justify="left",
        caption=(
            f"verdict: after ÷ before req/s (the median of the rounds' ratios) ≥ {WITHIN:.2f} is "
            "within 10 %"
        ),
    )
    for name in ("setup", "mode"):
        table.add_column(name)
    names = (
        "before req/s", "after req/s", "after ÷ before", "each round",
        "CPU µs/request", "added p50 ms", "added p99 ms", "p50 ms", "p99 ms", "errors",
    )  # fmt: skip
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("verdict")
    rows = comparison.rows()
    for row in rows:
        errors = f"{row.before_errors:,} → {row.after_errors:,}"
        table.add_row(
            row.setup,
            row.mode,
            _num(row.before_rate_per_s, 0),
            _num(row.after_rate_per_s, 0),
            "—" if row.ratio is None else f"{row.ratio:.2f}",
            " ".join(f"{r:.2f}" for r in row.round_ratios) or "—",
            _pair(row.before_cpu_us, row.after_cpu_us, digits=0),
            _pair(row.before_added_p50_ms, row.after_added_p50_ms, signed=True),
            _pair(row.before_added_p99_ms, row.after_added_p99_ms, signed=True),
            _pair(row.before_p50_ms, row.after_p50_ms),
            _pair(row.before_p99_ms, row.after_p99_ms),
            f"[red]{errors}[/]" if row.before_errors or row.after_errors else errors,
            row.verdict if row.ratio is None or row.ratio >= WITHIN else f"[red]{row.verdict}[/]",
        )
    console.print(table)
    for row in rows:
        ratio = "—" if row.ratio is None else f"{row.ratio:.2f}"
        console.print(
            f"verdict · {row.setup} · {row.mode}: after ÷ before req/s {ratio}: {row.verdict}"
            + _cpu_said(row),
            markup=False,
            highlight=False,
        )
    print_footer(comparison.notes, comparison.logs, console)
