"""Planner benchmark, measuring and printing: the machine, timed make_plan runs, the result
values (and their JSON), the tables, and the optional cProfile.
"""

from __future__ import annotations

import cProfile
import os
import platform
import pstats
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.planner_spec import GPU_MODEL, GPUS_PER_NODE
from gpuplex.core.plan import Target, make_plan
from gpuplex.core.spec import GpuplexSpec

# ---------------------------------------------------------------------------------------------------
# Measuring.


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    python: str
    platform: str


@dataclass(frozen=True)
class Input:
    nodes: int
    gpus: int
    gpus_by_pool: dict[str, int]
    tenants: int
    workloads: int
    replicas: int
    replicas_by_mode: dict[str, int]
    demand_gpus: float  # sum of gpu_share over the replicas
    fill: float  # demand_gpus / gpus
    lower_bound: int
    lower_bound_by_mode: dict[str, int]


@dataclass(frozen=True)
class Measured:
    placer: str
    seconds: list[float]  # every run; the best counts
    finished: bool  # False: the naive baseline stopped at its time limit
    placed: int
    not_placed: int
    gpus_used: int

    @property
    def best_s(self) -> float:
        return min(self.seconds)


@dataclass(frozen=True)
class Results:
    machine: Machine
    input: Input
    runs: list[Measured]  # make_plan binpack first, then the baselines
    target_s: float | None  # set at the sizes (1,000 or 10,000 nodes, 10 workloads each)

    def as_json(self) -> dict[str, Any]:
        first, bound = self.runs[0], self.input.lower_bound
        runs = [
            asdict(m)
            | {
                "best_s": m.best_s,
                "placements_per_s": m.placed / m.best_s,
                "used_over_lower_bound": m.gpus_used / bound,
                "time_over_make_plan": m.best_s / first.best_s,
                "gpus_over_make_plan": m.gpus_used / first.gpus_used,
            }
            for m in self.runs
        ]
        target = {"target_s": self.target_s, "target_met": first.best_s < (self.target_s or 0)}
        return {"machine": asdict(self.machine), "input": asdict(self.input), "runs": runs} | (
            target if self.target_s is not None else {}
        )


def machine() -> Machine:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            names = [
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            ]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return Machine(
        cpu=cpu,
        cores=os.cpu_count() or 1,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=platform.platform(terse=True),
    )


def time_make_plan(
    placer: str, spec: GpuplexSpec, runs: int, target: Target | None = None
) -> Measured:
    """`runs` fresh make_plan calls on the same spec (for `target`, else the spec's own)."""
    seconds: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        plan = make_plan(spec, target=target)
        seconds.append(time.perf_counter() - started)
    summary = plan.summary
    return Measured(
        placer=placer,
        seconds=seconds,
        finished=True,
        placed=summary.replicas_placed,
        not_placed=summary.replicas_infeasible + summary.preemptions,
        gpus_used=summary.gpus_used,
    )


# ---------------------------------------------------------------------------------------------------
# Output.


def print_tables(results: Results, console: Console) -> None:
    m, w = results.machine, results.input
    about = Table(title="gpuplex planner benchmark: machine and input", title_justify="left")
    about.add_column("")
    about.add_column("")
    modes = ", ".join(f"{mode} {n:,}" for mode, n in w.replicas_by_mode.items())
    bounds = ", ".join(f"{mode} {n:,}" for mode, n in w.lower_bound_by_mode.items())
    for name, value in (
        ("CPU", f"{m.cpu}, {m.cores} cores"),
        ("Python", f"{m.python} on {m.platform}"),
        ("fleet", f"{w.nodes:,} nodes x {GPUS_PER_NODE} {GPU_MODEL} = {w.gpus:,} GPUs"),
        ("pools", ", ".join(f"{pool} {n:,} GPUs" for pool, n in w.gpus_by_pool.items())),
        ("tenants / workloads", f"{w.tenants:,} / {w.workloads:,}"),
        ("replicas", f"{w.replicas:,} ({modes})"),
        ("demand", f"{w.demand_gpus:,.1f} GPUs = {w.fill:.1%} of the fleet"),
        ("lower bound", f"{w.lower_bound:,} GPUs ({bounds})"),
    ):
        about.add_row(name, value)
    console.print(about)

    table = Table(title="placement: time and packing", title_justify="left")
    for n, column in enumerate(PLACEMENT_COLUMNS):
        table.add_column(column, justify="left" if n == 0 else "right")
    for row in results.as_json()["runs"]:
        runs = " / ".join(f"{x:.3f}" for x in row["seconds"])
        best = f"{row['best_s']:.3f}" + ("" if row["finished"] else " (stopped at the limit)")
        table.add_row(
            row["placer"],
            runs,
            best,
            f"{row['placements_per_s']:,.0f}",
            f"{row['placed']:,}",
            f"{row['not_placed']:,}",
            f"{row['gpus_used']:,}",
            f"{row['used_over_lower_bound']:.3f}",
            f"{row['time_over_make_plan']:.2f}x",
            f"{row['gpus_over_make_plan']:.3f}x",
        )
    console.print(table)
    console.print(NOTES)
    first = results.runs[0]
    if results.target_s is not None:
        verdict = "met" if first.best_s < results.target_s else "MISSED"
        console.print(
            f"Target: make_plan under {results.target_s:.0f} s at {w.nodes:,} nodes x "
            f"{GPUS_PER_NODE} GPUs and {w.workloads:,} workloads: {verdict} "
            f"(best {first.best_s:.2f} s)."
        )


PLACEMENT_COLUMNS = (
    "placer",
    "runs (s)",
    "best (s)",
    "placements/s",
    "placed",
    "not placed",
    "GPUs used",
    "used / bound",
    "time vs binpack",
    "GPUs vs binpack",
)

NOTES = """\
make_plan, binpack: spec in, Plan value out (mode choice, ordering, placement, Plan assembly), fresh calls.
make_plan, for Kubernetes: the same, target Kubernetes (one sharing method per node, no MPS beside MIG).
baseline: spread: make_plan on the same spec with policy.placement spread (preemption as in the spec), one run.
baseline: first fit: naive first fit written in this script: the placement loop only, over the planner's own
  replicas in the planner's order (priority, then largest first); each replica takes the first GPU in fleet
  order where it fits, MIG at the lowest free start; no index, no scoring.
not placed: infeasible or preempted. used / bound: GPUs used over the lower bound.
time vs binpack: best seconds over make_plan binpack's best; GPUs vs binpack: GPUs used over binpack's."""


def profile_make_plan(spec: GpuplexSpec, top: int, console: Console) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    make_plan(spec)
    profiler.disable()
    console.print(f"cProfile of one make_plan call (binpack), top {top} by cumulative time:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)
