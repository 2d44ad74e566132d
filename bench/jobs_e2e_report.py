"""Jobs benchmark, end to end, the numbers: each flow's figures (submits/s, jobs/s, submit-to-start
percentiles) from its jobs' recorded times, the ratios to the baselines of the same run, and the
tables: the end-to-end one, and the summary that puts the engine-only figure beside it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.jobs_e2e_client import JobTimes, Submitted
from bench.planner_measure import Machine

#: The flows, by what they run.
UP = "gpuplex up"
FLOOR = "server + host, intervals at the floor"
HOST_ALONE = "host alone, no queue (lower bound)"


@dataclass
class FlowRun:
    """One flow measured once: a stack started, lone jobs then a flood of N through it, stopped.
    For HOST_ALONE the "jobs" are one-replica workloads, "submitted" when their spec is applied."""

    flow: str  # UP, FLOOR or HOST_ALONE
    tree: str  # "after" (the working tree) or "before" (--against REF)
    round: int
    runner_interval_s: float | None  # None: no job runner involved (HOST_ALONE)
    host_interval_s: float | None
    lone: list[JobTimes]  # one at a time: each submitted once the one before runs
    flood: list[JobTimes]  # all submitted at once, as fast as the clients go
    submits: list[Submitted] = field(default_factory=list)  # the flood's; none for HOST_ALONE
    start_s: float = 0.0  # the stack's start-up, not in any figure

    def submits_per_s(self) -> float | None:
        accepted = [s for s in self.submits if s.job_id is not None]
        if not accepted:
            return None
        span = max(s.replied_s for s in accepted) - min(s.sent_s for s in accepted)
        return len(accepted) / span if span > 0 else None


Step = Callable[[JobTimes], float | None]


def starting(t: JobTimes) -> float | None:
    return t.starting_s


def process(t: JobTimes) -> float | None:
    return t.process_s


def running(t: JobTimes) -> float | None:
    return t.running_s


def per_s(times: Sequence[JobTimes], step: Step) -> float | None:
    """Jobs per second, from the first submit to the last job reaching `step` (None unless all
    did)."""
    reached = [s for t in times if (s := step(t)) is not None]
    if not reached or len(reached) < len(times):
        return None
    span = max(reached) - min(t.submitted_s for t in times)
    return len(reached) / span if span > 0 else None


def latency_s(times: Sequence[JobTimes], step: Step, q: float) -> float | None:
    """The q-th percentile of the waits from each job's submit to its `step`."""
    waits = [s - t.submitted_s for t in times if (s := step(t)) is not None]
    return float(np.percentile(waits, q)) if waits else None


def _lone(step: Step, q: float) -> Callable[[FlowRun], float | None]:
    return lambda r: latency_s(r.lone, step, q)


def _flood(step: Step, q: float) -> Callable[[FlowRun], float | None]:
    return lambda r: latency_s(r.flood, step, q)


#: (name, how it is read from a run): the rows of the flows table
FIGURES: list[tuple[str, Callable[[FlowRun], float | None]]] = [
    ("lone job: to starting p50 s", _lone(starting, 50)),
    ("lone job: to process p50 s", _lone(process, 50)),
    ("lone job: to process p95 s", _lone(process, 95)),
    ("lone job: to running p50 s", _lone(running, 50)),
    ("lone job: to running p95 s", _lone(running, 95)),
    ("flood: submits/s accepted", FlowRun.submits_per_s),
    ("flood: jobs/s running", lambda r: per_s(r.flood, running)),
    ("flood: jobs/s process started", lambda r: per_s(r.flood, process)),
    ("flood: to starting p50 s", _flood(starting, 50)),
    ("flood: to starting p95 s", _flood(starting, 95)),
    ("flood: to process p50 s", _flood(process, 50)),
    ("flood: to process p95 s", _flood(process, 95)),
    ("flood: to running p50 s", _flood(running, 50)),
    ("flood: to running p95 s", _flood(running, 95)),
]
FIGURE = dict(FIGURES)
#: Compared with the lower bound: a queue flow's figure, and the lower bound's (its figures are
#: of its processes starting, from the apply request: it has no `starting` or `running`)
AGAINST_BOUND = [
    ("lone job: to process p50 s", "lone job: to process p50 s"),
    ("lone job: to running p50 s", "lone job: to process p50 s"),
    ("lone job: to running p95 s", "lone job: to process p95 s"),
    ("flood: jobs/s running", "flood: jobs/s process started"),
    ("flood: to running p50 s", "flood: to process p50 s"),
    ("flood: to running p95 s", "flood: to process p95 s"),
]
#: `gpuplex up` against the floor flow: what the intervals cost
AGAINST_FLOOR = [
    "lone job: to running p50 s",
    "lone job: to running p95 s",
    "flood: jobs/s running",
    "flood: to running p50 s",
]
#: --against: after against before
AGAINST_TREE = [
    "lone job: to running p50 s",
    "flood: submits/s accepted",
    "flood: jobs/s running",
    "flood: to running p50 s",
    "flood: to running p95 s",
]
#: the summary's end-to-end rows: what a user gets from `gpuplex up`, and at the floor
SUMMARY = [
    (UP, "lone job: to running p50 s"),
    (UP, "lone job: to running p95 s"),
    (UP, "flood: jobs/s running"),
    (UP, "flood: to running p50 s"),
    (UP, "flood: to running p95 s"),
    (FLOOR, "lone job: to running p50 s"),
    (FLOOR, "flood: jobs/s running"),
]


@dataclass
class EndToEnd:
    machine: Machine
    load_average: str
    settings: dict[str, object]
    trees: dict[str, str]  # name -> label ("after": the working tree, "before": REF = …)
    runs: list[FlowRun] = field(default_factory=list)

    def of(self, flow: str, tree: str = "after") -> list[FlowRun]:
        return [r for r in self.runs if r.flow == flow and r.tree == tree]

    def figure(self, flow: str, name: str, tree: str = "after") -> float | None:
        """The median over rounds of `name` for `flow` on `tree`."""
        values = [v for r in self.of(flow, tree) if (v := FIGURE[name](r)) is not None]
        return float(np.median(values)) if values else None

    def paired_ratio(self, flow: str, name: str) -> float | None:
        """after ÷ before of `name`: the median of each round's ratio (the two trees run back to
        back within a round, so the machine's drift cancels out of each pair)."""
        ratios = []
        for after in self.of(flow, "after"):
            before = [r for r in self.of(flow, "before") if r.round == after.round]
            a = FIGURE[name](after)
            b = FIGURE[name](before[0]) if before else None
            if a is not None and b:
                ratios.append(a / b)
        return float(np.median(ratios)) if ratios else None


def number(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def machine_line(machine: Machine, load_average: str) -> str:
    return (
        f"{machine.cpu}, {machine.cores} cores, {machine.python}, {machine.platform}; "
        f"load average {load_average}"
    )


def print_end_to_end(result: EndToEnd, console: Console) -> None:
    console.print(
        f"\n(iii) end to end · machine: {machine_line(result.machine, result.load_average)}",
        highlight=False,
    )
    for name, label in result.trees.items():
        console.print(f"  {name}: {escape(label)}", highlight=False)
    settings = ", ".join(f"{k} {v}" for k, v in result.settings.items())
    console.print(f"  settings: {escape(settings)}", highlight=False)
    shown: list[tuple[str, str]] = []
    for run in result.runs:
        if (run.flow, run.tree) not in shown:
            shown.append((run.flow, run.tree))
    table = Table(title="flows (median over rounds; waits from the submit, in seconds)")
    table.add_column("figure")
    for flow, tree in shown:
        table.add_column(f"{flow} · {tree}", justify="right")
    intervals = []
    for flow, tree in shown:
        run = result.of(flow, tree)[0]
        intervals.append(f"{number(run.runner_interval_s, 1)} / {number(run.host_interval_s, 1)}")
    table.add_row("runner / host interval s", *intervals)
    for name, _ in FIGURES:
        table.add_row(name, *(number(result.figure(f, name, t)) for f, t in shown))
    console.print(table)
    console.print(ratio_table(result))


def ratio_table(result: EndToEnd) -> Table:
    """Each end-to-end figure against its baseline of the same run."""
    table = Table(title="each against its baseline, same run")
    for name in ("figure", "measured", "baseline", "baseline value", "ratio"):
        table.add_column(
            name, justify="right" if "value" in name or name in ("measured", "ratio") else "left"
        )
    for row in ratio_rows(result):
        table.add_row(*row)
    return table


def ratio_rows(result: EndToEnd) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for flow in (UP, FLOOR):
        for tree in result.trees:
            if not result.of(flow, tree):
                continue
            for name, bound_name in AGAINST_BOUND:
                value = result.figure(flow, name, tree)
                base = result.figure(HOST_ALONE, bound_name)
                label = f"{flow} · {tree}: {name}"
                rows.append(_row(label, value, f"{HOST_ALONE}: {bound_name}", base))
    for tree in result.trees:
        if result.of(UP, tree) and result.of(FLOOR, tree):
            for name in AGAINST_FLOOR:
                value, base = result.figure(UP, name, tree), result.figure(FLOOR, name, tree)
                rows.append(_row(f"{UP} · {tree}: {name}", value, f"{FLOOR} · {tree}", base))
    if "before" in result.trees:
        for flow in (UP, FLOOR):
            if not result.of(flow, "before"):
                continue
            for name in AGAINST_TREE:
                after = result.figure(flow, name, "after")
                before = result.figure(flow, name, "before")
                paired = result.paired_ratio(flow, name)
                rows.append(
                    (
                        f"{flow} · after: {name}",
                        number(after),
                        f"{flow} · before",
                        number(before),
                        number(paired, 3),
                    )
                )
    return rows


def _row(
    label: str, value: float | None, baseline: str, base: float | None
) -> tuple[str, str, str, str, str]:
    return (label, number(value), baseline, number(base), number(ratio(value, base), 3))


@dataclass(frozen=True)
class EngineFigure:
    """The engine-only figure of bench/jobs.py (i): admissions/s, against the Kueue anchor."""

    rate_per_s: float
    anchor_per_s: float


def print_summary(
    machine: Machine,
    load_average: str,
    engine: EngineFigure | None,
    end_to_end: EndToEnd | None,
    console: Console,
) -> None:
    """One table, engine-only and end to end side by side, each against its baseline."""
    table = Table(title=f"jobs: summary · {machine_line(machine, load_average)}")
    for name in ("figure", "measured", "baseline", "baseline value", "ratio"):
        table.add_column(
            name, justify="right" if name in ("measured", "baseline value", "ratio") else "left"
        )
    if engine is not None:
        table.add_row(
            "engine only: admissions/s (`admit_ordered`, 10,000 jobs)",
            number(engine.rate_per_s),
            "Kueue, a few tens/s (anchor)",
            number(engine.anchor_per_s),
            number(ratio(engine.rate_per_s, engine.anchor_per_s), 1),
        )
    if end_to_end is not None:
        wanted = {f"{flow} · after: {name}" for flow, name in SUMMARY}
        for row in ratio_rows(end_to_end):
            if row[0] in wanted and row[2].startswith(HOST_ALONE):
                table.add_row(f"end to end, {row[0]}", *row[1:])
        for row in ratio_rows(end_to_end):
            if row[2] == f"{UP} · before":
                table.add_row(f"end to end, {row[0]}", *row[1:])
    console.print(table)
