"""The dynamic openb replay, placement policy against placement policy: best-fit, FGD and
fgd-balanced through the queue rules, on each openb pod list that carries creation and deletion
times, several seeds and speedups, each policy against best-fit of the same family, seed and
speedup (the same run).

    .venv/bin/python bench/jobs_policies.py [--data ../shared/data/openb]
        [--families default,gpushare40] [--seeds 1,2,3] [--speedups 50,100]
        [--policies best-fit,fgd,fgd-balanced] [--workers 2] [--against REF] [--json]

Each run is `replay_jobs` as `bench/jobs.py` (ii) runs it: the pod list over every 20th openb GPU
node (61 nodes, 314 GPUs), arrivals `speedup` times faster than the trace (durations kept), the
tenants of bench/jobs_tenants.yaml drawn with the seed, the queue rules. Printed per run: delay
p50, p99 and the longest over all pods that started (seconds of replay time: a few starved large
pods hide under the p99), pods that never started, mean
GPUs allocated, mean Jain index while pods wait, "no node has room" events and preemptions; and
per policy the ratios to best-fit's p99, longest delay and GPUs. Then gpuplex's choice of policy
(`gpuplex.replay.policy_choice`, as `gpuplex simulate --arrivals` makes it) per group and seed,
and what choosing costs or gains against running one policy everywhere: the chosen policy's p99
and longest wait over each policy's, chosen from the same replay, and chosen from another seed's
replay of the same group (a different draw of tenants: the choice made from one recording, lived
with on the next).

With `--against REF`, REF's replay (its src/ first on the path, this script) runs the same cells
too, and each cell prints REF's figures beside this tree's: the replay is deterministic for a
seed, so one run of each tells them apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np

from bench.gateway_procs import (
    checkout,
    describe_ref,
    describe_working_tree,
    script_json_with_src,
)
from bench.planner_measure import machine
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.jobs_report import tenant_rows, timeline
from gpuplex.replay.openb import load_nodes, load_timed_pods
from gpuplex.replay.policy_choice import PolicyOutcome, choose_policy, outcome_of
from gpuplex.replay.tenants_file import parse_tenants_file
from gpuplex.specfile import load_yaml_file

HERE = Path(__file__).resolve().parent
BASELINE = "best-fit"


@dataclass(frozen=True)
class Cell:
    family: str
    seed: int
    speedup: float
    policy: str


@dataclass(frozen=True)
class Figures:
    p50_s: float
    p99_s: float
    never: int
    gpus: float
    jain_wait: float
    no_room: int
    preemptions: int
    seconds: float
    longest_s: float = 0.0  # absent from the JSON of commits before it was added


def run_cell(data: str, cell: Cell) -> Figures:
    """One replay (see the module docstring)."""
    folder = Path(data)
    nodes = load_nodes(folder / "openb_node_list_gpu_node.csv")[::20]
    pods = load_timed_pods(folder / f"openb_pod_list_{cell.family}.csv")
    tenants = load_yaml_file(HERE / "jobs_tenants.yaml", parse_tenants_file)
    owners = tenants.assign([p.pod.name for p in pods], np.random.default_rng(cell.seed))
    tree = tenants.tree({GPUS: float(sum(n.gpus for n in nodes))})
    started = time.perf_counter()
    result = replay_jobs(
        nodes, pods, owners, tree=tree, policy=cell.policy, seed=cell.seed, speedup=cell.speedup
    )
    spent = time.perf_counter() - started
    line = timeline(result, tree)
    rows = tenant_rows(result, line)
    delays = [d for r in result.records if (d := r.delay_s) is not None]
    outcome = outcome_of(result)  # the figures gpuplex's choice reads, as `gpuplex simulate`
    return Figures(
        p50_s=float(np.percentile(delays, 50)) if delays else 0.0,
        p99_s=outcome.p99_delay_s,
        longest_s=outcome.longest_delay_s,
        never=outcome.never_started,
        gpus=sum(r.mean_gpus for r in rows),
        jain_wait=line.mean_jain_contended,
        no_room=result.no_room,
        preemptions=sum(r.preemptions for r in rows),
        seconds=spent,
    )


def run_all(data: str, cells: list[Cell], workers: int) -> dict[Cell, Figures]:
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = pool.map(run_cell, [data] * len(cells), cells)
        return dict(zip(cells, done, strict=True))


def ref_figures(ref: str, argv: list[str]) -> dict[Cell, Figures]:
    """REF's figures for the same cells: this script with REF's src/ first on the path."""
    with checkout(ref) as tree:
        rows = script_json_with_src(tree, HERE / "jobs_policies.py", argv)
    assert isinstance(rows, list)
    return {Cell(**row["cell"]): Figures(**row["figures"]) for row in rows}


def ratio(value: float, base: float) -> str:
    return f"{value / base:.3f}" if base else "-"


def print_tables(
    cells: list[Cell], mine: dict[Cell, Figures], theirs: dict[Cell, Figures] | None
) -> None:
    groups = sorted({(c.family, c.speedup) for c in cells})
    for family, speedup in groups:
        print(f"\n{family}, arrivals {speedup:g}x faster (delays in s of replay time)")
        header = "| seed | policy | p50 | p99 | longest | never | GPUs | Jain waiting | no room "
        header += "| preempted | p99 / best-fit | longest / best-fit | GPUs / best-fit |"
        if theirs is not None:
            header += " REF p99 | REF GPUs | REF no room | REF preempted |"
        print(header)
        print("|" + "---|" * (header.count("|") - 1))
        for cell in [c for c in cells if (c.family, c.speedup) == (family, speedup)]:
            f = mine[cell]
            base = mine[Cell(family, cell.seed, speedup, BASELINE)]
            row = (
                f"| {cell.seed} | {cell.policy} | {f.p50_s:,.0f} | {f.p99_s:,.0f} "
                f"| {f.longest_s:,.0f} | {f.never} | {f.gpus:.1f} | {f.jain_wait:.3f} "
                f"| {f.no_room:,} | {f.preemptions} | {ratio(f.p99_s, base.p99_s)} "
                f"| {ratio(f.longest_s, base.longest_s)} | {ratio(f.gpus, base.gpus)} |"
            )
            if theirs is not None:
                t = theirs[cell]
                row += f" {t.p99_s:,.0f} | {t.gpus:.1f} | {t.no_room:,} | {t.preemptions} |"
            print(row)
    policies = sorted({c.policy for c in cells} - {BASELINE})
    print("\nGeometric mean over the seeds of each policy's ratio to best-fit:")
    for family, speedup in groups:
        for policy in policies:
            mine_cells = [
                c for c in cells if (c.family, c.speedup, c.policy) == (family, speedup, policy)
            ]
            bases = [mine[Cell(family, c.seed, speedup, BASELINE)] for c in mine_cells]
            p99 = [mine[c].p99_s / b.p99_s for c, b in zip(mine_cells, bases, strict=True)]
            gpus = [mine[c].gpus / b.gpus for c, b in zip(mine_cells, bases, strict=True)]
            longest = [
                mine[c].longest_s / b.longest_s for c, b in zip(mine_cells, bases, strict=True)
            ]
            print(
                f"  {family} x{speedup:g} {policy}: p99 {_geomean(p99):.3f}, "
                f"longest {_geomean(longest):.3f} (worst seed {max(longest):.3f}), "
                f"GPUs {_geomean(gpus):.3f}"
            )


def print_choices(cells: list[Cell], mine: dict[Cell, Figures]) -> None:
    """gpuplex's choice per group and seed, and the chosen p99 over each fixed policy's (geometric
    mean over every group and seed), chosen from the same seed and from each other seed."""
    policies = list(dict.fromkeys(c.policy for c in cells))
    groups = sorted({(c.family, c.speedup) for c in cells})
    seeds = sorted({c.seed for c in cells})
    print("\ngpuplex's choice (gpuplex.replay.policy_choice) per group and seed:")
    chosen: dict[tuple[str, float, int], str] = {}
    for family, speedup in groups:
        for seed in seeds:
            outcomes = [
                PolicyOutcome(p, f.never, f.p99_s, f.longest_s, f.gpus)
                for p in policies
                for f in [mine[Cell(family, seed, speedup, p)]]
            ]
            choice = choose_policy(outcomes)
            chosen[(family, speedup, seed)] = choice.policy
            print(f"  {family} x{speedup:g} seed {seed}: {choice.policy} ({choice.reason})")
    same, other = [], []
    for family, speedup in groups:
        for seed in seeds:
            same.append((family, speedup, seed, chosen[(family, speedup, seed)]))
            other += [
                (family, speedup, seed, chosen[(family, speedup, s)]) for s in seeds if s != seed
            ]
    print(
        "\nThe chosen policy's p99 and longest wait over each fixed policy's "
        "(geometric mean over groups and seeds):"
    )
    picked = (("chosen from the same replay", same), ("chosen from another seed", other))
    for label, picks in picked:
        for figure in ("p99_s", "longest_s"):
            ratios = {
                p: _geomean(
                    [
                        getattr(mine[Cell(f, seed, sp, pick)], figure)
                        / getattr(mine[Cell(f, seed, sp, p)], figure)
                        for f, sp, seed, pick in picks
                    ]
                )
                for p in policies
            }
            name = figure.removesuffix("_s")
            print(f"  {label}, {name}: " + ", ".join(f"/ {p} {r:.3f}" for p, r in ratios.items()))


def _geomean(ratios: list[float]) -> float:
    return float(np.exp(np.mean(np.log(ratios))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/data/openb")
    parser.add_argument("--families", default="default,gpushare40")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--speedups", default="50,100")
    parser.add_argument("--policies", default="best-fit,fgd,fgd-balanced")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--against", metavar="REF")
    parser.add_argument("--json", action="store_true", help="the figures as JSON, nothing else")
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    if BASELINE not in policies:
        parser.error(f"--policies must include {BASELINE}, the baseline")
    cells = [
        Cell(family, int(seed), float(speedup), policy)
        for family in args.families.split(",")
        for speedup in args.speedups.split(",")
        for seed in args.seeds.split(",")
        for policy in policies
    ]
    if not args.json:
        load = " ".join(f"{n:.2f}" for n in os.getloadavg())
        print(f"{machine()}; load average {load} at start; {len(cells)} runs")
    started = time.perf_counter()
    mine = run_all(args.data, cells, args.workers)
    if args.json:
        rows = [{"cell": asdict(c), "figures": asdict(f)} for c, f in mine.items()]
        print(json.dumps(rows))
        return 0
    theirs = None
    if args.against:
        print(
            f"before: {describe_ref(args.against)}\nafter:  {describe_working_tree(args.against)}"
        )
        same = [
            f"--data={Path(args.data).resolve()}",
            f"--families={args.families}",
            f"--seeds={args.seeds}",
            f"--speedups={args.speedups}",
            f"--policies={args.policies}",
            f"--workers={args.workers}",
        ]
        theirs = ref_figures(args.against, same)
    print_tables(cells, mine, theirs)
    print_choices(cells, mine)
    print(f"\n{time.perf_counter() - started:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
