"""Cluster placement replay benchmark: our baselines on the openb trace beside the FGD paper's numbers.

    .venv/bin/python bench/simulate_openb.py [--data ../shared/data/openb] [--seeds 10]
        [--first-seed 42] [--inflate 1.3] [--workload default --workload gpushare40]
        [--policy best-fit ...] [--json]
    .venv/bin/python bench/simulate_openb.py --variants [--family gpuspec ...] [--variant-seed 0]

For each workload (openb_pod_list_<name>.csv on the 1,213 GPU nodes of openb_node_list_gpu_node.csv)
and each policy, `gpuplex.replay.placement.replay` runs once per seed (42..51 by default, inflate 1.3, as
the paper's artifact does). The table shows the GPU allocation ratio when the arrived GPU demand
reaches 100 % of capacity, mean (min..max) over the seeds, the published figure (Weng et al., ATC '23,
Fig. 7 and 9a; the artifact's `analysis_allo_discrete.csv`), the difference, the ratio at 130 %, and
the seconds one seed takes. When FGD ran in the same run, each other policy is also shown against
it: the ratio of the means, and on how many seeds it allocated more than FGD did with the same seed.

`--variants` replays, instead, the variants of the `default` pod list that `bench/openb_variants.py`
draws (the FGD paper's families: GPU-sharing, multi-GPU, model-bound and CPU-only pods, a few
levels each), with `fgd-balanced` against `fgd` (or the `--policy` pair, the baseline first): a
table per family with both means (min..max) over the seeds, the ratio, the seeds won, the
seconds per seed of each, and the family's mean over its levels.
The trace is read from --data and never copied into the repository.
Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.openb_variants import openb_variant
from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.core.trace.variants import FAMILY_LEVELS, variants
from gpuplex.replay.openb import load_nodes, load_pods
from gpuplex.replay.placement import POLICY_NAMES, replay

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "openb"

#: GPU allocation ratio (%) at 100 % arrived demand, 10 seeds, as published; first-fit is not
PUBLISHED: dict[str, dict[str, float]] = {
    "default": {
        "random": 86.30,
        "dot-product": 90.62,
        "gpu-packing": 91.78,
        "best-fit": 92.86,
        "fgd": 95.23,
    },
    "gpushare40": {
        "random": 84.86,
        "dot-product": 89.30,
        "gpu-packing": 89.77,
        "best-fit": 91.44,
        "fgd": 93.96,
    },
}


@dataclass(frozen=True, slots=True)
class Row:
    workload: str
    policy: str
    seeds: int
    mean_100: float
    min_100: float
    max_100: float
    mean_130: float
    published_100: float | None
    seconds_per_seed: float
    per_seed_100: tuple[float, ...] = ()
    cpu_seconds_per_seed: float = 0.0

    @property
    def difference(self) -> float | None:
        return None if self.published_100 is None else self.mean_100 - self.published_100


def measure(data: Path, workload: str, policy: str, seeds: list[int], inflate: float) -> Row:
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    pods = load_pods(data / f"openb_pod_list_{workload}.csv")
    return measure_pods(nodes, pods, workload, policy, seeds, inflate)


def measure_pods(
    nodes: list[TraceNode],
    pods: list[TracePod],
    workload: str,
    policy: str,
    seeds: list[int],
    inflate: float,
) -> Row:
    at_100: list[float] = []
    at_top: list[float] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    for seed in seeds:
        result = replay(nodes, pods, policy, seed=seed, inflate=inflate)
        at_100.append(result.at(100))
        at_top.append(result.allocation_percent[-1])
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    return Row(
        workload=workload,
        policy=policy,
        seeds=len(seeds),
        mean_100=statistics.fmean(at_100),
        min_100=min(at_100),
        max_100=max(at_100),
        mean_130=statistics.fmean(at_top),
        published_100=PUBLISHED.get(workload, {}).get(policy),
        seconds_per_seed=elapsed / len(seeds),
        per_seed_100=tuple(at_100),
        cpu_seconds_per_seed=cpu / len(seeds),
    )


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"CPython {platform.python_version()}, load average {os.getloadavg()[0]:.2f}"
    )


def table(rows: list[Row], seeds: list[int], inflate: float) -> Table:
    out = Table(
        title=f"GPU allocation % at 100 % arrived demand (seeds {seeds[0]}..{seeds[-1]}, "
        f"inflate {inflate})"
    )
    for column in (
        "workload",
        "policy",
        "ours (min..max)",
        "published",
        "diff",
        "ours @ top",
        "vs fgd: ratio (seeds won)",
        "s/seed",
    ):
        out.add_column(column, justify="left" if column in ("workload", "policy") else "right")
    fgd = {row.workload: row for row in rows if row.policy == "fgd"}
    for row in rows:
        published = "-" if row.published_100 is None else f"{row.published_100:.2f}"
        diff = "-" if row.difference is None else f"{row.difference:+.2f}"
        baseline = fgd.get(row.workload)
        versus = "-" if baseline is None or baseline is row else against(row, baseline)
        out.add_row(
            row.workload,
            row.policy,
            f"{row.mean_100:.2f} ({row.min_100:.2f}..{row.max_100:.2f})",
            published,
            diff,
            f"{row.mean_130:.2f}",
            versus,
            f"{row.seconds_per_seed:.2f}",
        )
    return out


def against(row: Row, baseline: Row) -> str:
    """The ratio of the means and the seeds (paired by seed) on which `row` allocated more."""
    ratio = row.mean_100 / baseline.mean_100
    wins = sum(
        ours > theirs for ours, theirs in zip(row.per_seed_100, baseline.per_seed_100, strict=True)
    )
    return f"{ratio:.4f}x ({wins}/{len(row.per_seed_100)})"


def variant_rows(
    data: Path, families: list[str], policies: tuple[str, str], seeds: list[int], args: Any
) -> list[Row]:
    """Both policies on every variant of `families`, each variant drawn once."""
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")
    rows: list[Row] = []
    for variant in variants(families):
        if args.only and variant.name not in args.only:
            continue
        pods = openb_variant(data, variant, seed=args.variant_seed)
        for policy in policies:
            rows.append(measure_pods(nodes, pods, variant.name, policy, seeds, args.inflate))
            print(f"{variant.name} {policy}: {rows[-1].mean_100:.2f}", file=sys.stderr, flush=True)
    return rows


def seconds(rows: Iterable[Row]) -> str:
    """Mean wall (and CPU) seconds per seed over `rows`."""
    listed = list(rows)
    wall = statistics.fmean(r.seconds_per_seed for r in listed)
    return f"{wall:.2f} ({statistics.fmean(r.cpu_seconds_per_seed for r in listed):.2f})"


def variant_tables(rows: list[Row], policies: tuple[str, str], seeds: list[int]) -> list[Table]:
    """One table per family: the baseline and ours per level, and the family's mean."""
    baseline, ours = policies
    tables = []
    for family in FAMILY_LEVELS:
        pairs = [
            (b, o)
            for b in rows
            for o in rows
            if b.workload == o.workload
            and b.workload.startswith(family)
            and (b.policy, o.policy) == (baseline, ours)
        ]
        if not pairs:
            continue
        out = Table(
            title=f"{family}: GPU allocation % at 100 % arrived (seeds {seeds[0]}..{seeds[-1]})"
        )
        for column in (
            "variant",
            baseline,
            ours,
            "ratio (seeds won)",
            f"s/seed {baseline} (CPU)",
            f"s/seed {ours} (CPU)",
        ):
            out.add_column(column, justify="left" if column == "variant" else "right")
        for b, o in pairs:
            out.add_row(
                b.workload,
                f"{b.mean_100:.2f} ({b.min_100:.2f}..{b.max_100:.2f})",
                f"{o.mean_100:.2f} ({o.min_100:.2f}..{o.max_100:.2f})",
                against(o, b),
                f"{b.seconds_per_seed:.2f} ({b.cpu_seconds_per_seed:.2f})",
                f"{o.seconds_per_seed:.2f} ({o.cpu_seconds_per_seed:.2f})",
            )
        mean_b = statistics.fmean(b.mean_100 for b, _ in pairs)
        mean_o = statistics.fmean(o.mean_100 for _, o in pairs)
        wins = sum(o.mean_100 > b.mean_100 for b, o in pairs)
        out.add_row(
            "family mean",
            f"{mean_b:.2f}",
            f"{mean_o:.2f}",
            f"{mean_o / mean_b:.4f}x ({wins}/{len(pairs)} levels)",
            seconds(b for b, _ in pairs),
            seconds(o for _, o in pairs),
        )
        tables.append(out)
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=42)
    parser.add_argument("--inflate", type=float, default=1.3)
    parser.add_argument("--workload", action="append", dest="workloads")
    parser.add_argument("--policy", action="append", dest="policies", choices=POLICY_NAMES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--family", action="append", dest="families", choices=list(FAMILY_LEVELS))
    parser.add_argument("--variant-seed", type=int, default=0)
    parser.add_argument("--only", action="append", dest="only", help="variant names to run")
    args = parser.parse_args(argv)
    workloads: list[str] = args.workloads or list(PUBLISHED)
    policies: list[str] = args.policies or list(POLICY_NAMES)
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    if not args.data.is_dir():
        print(f"the openb trace is not at {args.data}: give --data DIR", file=sys.stderr)
        return 2
    console = Console(width=max(Console().width, 110))
    if not args.json:
        console.print(f"machine: {machine()}")
    started = time.perf_counter()
    if args.variants:
        pair = tuple(args.policies or ("fgd", "fgd-balanced"))
        if len(pair) != 2:
            print("--variants compares two policies: give --policy twice", file=sys.stderr)
            return 2
        rows = variant_rows(args.data, args.families or [], pair, seeds, args)
        wall = time.perf_counter() - started
        if args.json:
            out = {"machine": machine(), "wall_s": wall, "rows": [asdict(r) for r in rows]}
            print(json.dumps(out))
            return 0
        for variant_table in variant_tables(rows, pair, seeds):
            console.print(variant_table)
        console.print(f"wall time {wall:.1f} s")
        return 0
    rows = [
        measure(args.data, workload, policy, seeds, args.inflate)
        for workload in workloads
        for policy in policies
    ]
    wall = time.perf_counter() - started
    if args.json:
        print(json.dumps({"machine": machine(), "wall_s": wall, "rows": [asdict(r) for r in rows]}))
    else:
        console.print(table(rows, seeds, args.inflate))
        console.print(f"wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
