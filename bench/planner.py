"""Planner benchmark: `make_plan` on a seeded fleet of N nodes x 8 H100-80GB and M mixed workloads.

    .venv/bin/python bench/planner.py [--nodes 1000] [--workloads 10000] [--seed 1] [--json]
    .venv/bin/python bench/planner.py --scale 10 --runs 1      # 10,000 nodes, 100,000 workloads

The fleet and the workloads are built in memory from the seed, so every run plans the same input.
Nodes are split 70 % long-running / 30 % bursty; about 200 tenants of every tier ask for whole GPUs
(1, 2, 4, 8), explicit MIG profiles, memory-sized MIG slices, MPS shares and time-slice shares. Replica
counts are scaled per pool so that the demand is about `--fill` (78 %) of the fleet: the benchmark
measures placement speed and packing quality, not infeasibility.

Measured, all in this one run (house rule 8):
- make_plan with policy binpack, best of 3 fresh calls (all 3 shown): wall time, placements/s, GPUs used;
- the same planned for Kubernetes (one sharing method per node, no MPS beside MIG), best of 3;
- the lower bound on GPUs: per pool and isolation mode, the most of ceil(demand / per-GPU capacity)
  over each resource (see `lower_bound`); GPUs used / lower bound is the packing ratio;
- baselines: a naive first-fit placer written for the benchmark (speed and packing), and make_plan
  with policy spread (packing), over the same replicas in the same order.

This file is the entry point (`run`, the flags, `main`); the rest lives beside it:
bench/planner_spec.py (the seeded input), bench/planner_bounds.py (`lower_bound` and the first-fit
baseline), bench/planner_measure.py (machine, timed make_plan runs, results, tables, cProfile).
Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a file (`python bench/planner.py`, as `make bench` does), Python puts bench/ on sys.path
# rather than the project root, and the `from bench.planner_... import` lines below need the root.
# Imported (tests) or run as `python -m bench.planner`, there is a package and nothing is added.
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
from collections import Counter
from collections.abc import Sequence

from rich.console import Console

from bench.planner_bounds import lower_bound, naive_first_fit
from bench.planner_measure import (
    Input,
    Results,
    machine,
    print_tables,
    profile_make_plan,
    time_make_plan,
)
from bench.planner_spec import TENANT_CLASSES, Options, build_spec, gpu_share, must_size
from gpuplex.core.plan import Target
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.units import build_units
from gpuplex.core.spec import PlacementPolicy

TARGET_S = 10.0  # issue 41's target for both sizes below
TARGET_SIZES = ((1000, 10000), (10000, 100000))  # (nodes x 8 H100, workloads)


def run(options: Options) -> Results:
    spec = build_spec(options)
    slots = build_inventory(spec.fleet, spec.policy.placement)
    _, units = build_units(spec, slots)  # the planner's own modes, demands and order
    model = slots[0].model
    bound, bound_by_mode = lower_bound(units, model)
    demand = sum(gpu_share(unit, must_size(unit, model), model) for unit in units)
    about = Input(
        nodes=options.nodes,
        gpus=len(slots),
        gpus_by_pool=dict(sorted(Counter(str(slot.pool) for slot in slots).items())),
        tenants=len(spec.tenants),
        workloads=sum(len(t.workloads) for t in spec.tenants),
        replicas=len(units),
        replicas_by_mode=dict(sorted(Counter(unit.mode.value for unit in units).items())),
        demand_gpus=round(demand, 1),
        fill=round(demand / len(slots), 3),
        lower_bound=bound,
        lower_bound_by_mode=bound_by_mode,
    )
    binpack = time_make_plan("make_plan, binpack", spec, options.runs)
    kubernetes = (
        [time_make_plan("make_plan, for Kubernetes", spec, options.runs, target=Target.KUBERNETES)]
        if options.kubernetes
        else []
    )
    spread_policy = spec.policy.model_copy(update={"placement": PlacementPolicy.SPREAD})
    spread_spec = spec.model_copy(update={"policy": spread_policy})
    spread = time_make_plan("baseline: spread", spread_spec, 1)
    naive = naive_first_fit(spec, slots, units, options.naive_limit_s)
    issue_size = (options.nodes, options.workloads) in TARGET_SIZES
    placers = [binpack, *kubernetes, spread, naive]
    return Results(machine(), about, placers, TARGET_S if issue_size else None)


def parse_options(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    defaults = Options()
    add = parser.add_argument
    add("--nodes", type=int, help=f"nodes of 8 H100-80GB (default {defaults.nodes:,} x scale)")
    add("--workloads", type=int, help=f"default {defaults.workloads:,} x scale")
    add("--tenants", type=int, help=f"default {defaults.tenants:,} x scale")
    add(
        "--scale",
        type=int,
        default=1,
        metavar="N",
        help="N x the default nodes, workloads and tenants (10: issue 41's fleet scale)",
    )
    add("--seed", type=int, default=defaults.seed)
    add("--fill", type=float, default=defaults.fill, help="demand as a share of the fleet")
    add("--runs", type=int, default=defaults.runs, help="make_plan runs; the best counts")
    add("--naive-limit-s", type=float, default=defaults.naive_limit_s, help="naive time limit")
    add("--json", action="store_true", help="print the results as JSON")
    add(
        "--no-kubernetes",
        dest="kubernetes",
        action="store_false",
        help="skip the row planned for Kubernetes (many minutes at 10,000 nodes and more)",
    )
    add("--profile", type=int, default=0, metavar="N", help="also print cProfile's top N")
    add("--against", metavar="REF", help="compare with the planner of git ref REF, same run")
    add("--rounds", type=int, default=5, help="with --against: rounds of before and after")
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error("need scale >= 1")
    for size in ("nodes", "workloads", "tenants"):
        if getattr(args, size) is None:
            setattr(args, size, getattr(defaults, size) * args.scale)
    if args.nodes < 1 or args.workloads < 1 or args.tenants < len(TENANT_CLASSES):
        parser.error(f"need nodes >= 1, workloads >= 1 and tenants >= {len(TENANT_CLASSES)}")
    if not 0 < args.fill <= 1 or args.runs < 1:
        parser.error("need 0 < fill <= 1 and runs >= 1")
    fields = (
        "nodes",
        "workloads",
        "tenants",
        "seed",
        "fill",
        "runs",
        "naive_limit_s",
        "kubernetes",
    )
    return Options(**{name: getattr(args, name) for name in fields}), args


def main(argv: Sequence[str] | None = None) -> int:
    options, args = parse_options(argv)
    if args.against is not None:
        from bench.planner_against import compare

        forwarded = _without_against(list(argv) if argv is not None else sys.argv[1:])
        console = Console() if sys.stdout.isatty() else Console(width=200)
        return 0 if compare(args.against, args.rounds, forwarded, console) else 1
    results = run(options)
    if args.json:
        print(json.dumps(results.as_json(), indent=2))
        return 0
    console = Console() if sys.stdout.isatty() else Console(width=200)
    print_tables(results, console)
    if args.profile:
        profile_make_plan(build_spec(options), args.profile, console)
    return 0


def _without_against(argv: Sequence[str]) -> list[str]:
    """The planner's own flags, for both trees: --against and --rounds taken out."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--against", "--rounds"):
            skip = True
        elif not arg.startswith(("--against=", "--rounds=")) and arg != "--json":
            out.append(arg)
    return out


if __name__ == "__main__":
    sys.exit(main())
