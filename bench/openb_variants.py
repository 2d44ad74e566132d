"""Variants of the openb pod list, as the FGD paper's artifact made them: a table of what each one
holds, or the variants written out as pod CSVs.

    .venv/bin/python bench/openb_variants.py [--data ../shared/data/openb] [--base default]
        [--family gpuspec ...] [--seed 0] [--out DIR]

Each variant (`gpuplex.core.trace.variants`: families `gpushare`, `multigpu`, `gpuspec`,
`cpuonly`, a few levels each) is drawn from openb_pod_list_<base>.csv with the seed, on the nodes
of openb_node_list_gpu_node.csv. The table shows, per variant, the four shares the families move;
`--out DIR` also writes each as DIR/openb_pod_list_<variant>.csv (the openb columns; `gpu_spec`
holds the accepted models joined by `|`). The trace is read from --data and never copied into the
repository; `bench/simulate_openb.py --variants` replays the variants.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import csv
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.core.trace.variants import (
    FAMILY_LEVELS,
    Variant,
    cpu_only_share,
    generate,
    gpu_request_share,
    is_model_constrained,
    is_multi_gpu,
    variants,
)
from gpuplex.replay.openb import load_nodes, load_pods

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "openb"
NODE_FILE = "openb_node_list_gpu_node.csv"


def openb_nodes(data: Path) -> list[TraceNode]:
    return load_nodes(data / NODE_FILE)


def openb_variant(
    data: Path, variant: Variant, *, base: str = "default", seed: int = 0
) -> list[TracePod]:
    """The variant's pods, drawn from openb_pod_list_<base>.csv under `data`."""
    pods = load_pods(data / f"openb_pod_list_{base}.csv")
    return generate(pods, openb_nodes(data), variant, seed)


def shares(pods: Sequence[TracePod]) -> dict[str, float]:
    """The four shares the families move, in % (the first three of the GPU request)."""
    gpu_pods = [p for p in pods if p.wants_gpu]
    return {
        "gpushare": 100 * gpu_request_share(gpu_pods, lambda p: p.is_shared),
        "multigpu": 100 * gpu_request_share(gpu_pods, is_multi_gpu),
        "gpuspec": 100 * gpu_request_share(gpu_pods, is_model_constrained),
        "cpuonly": 100 * cpu_only_share(pods),
    }


def write_pods(path: Path, pods: Sequence[TracePod]) -> None:
    """The pods as an openb pod CSV that `gpuplex.replay.openb.load_pods` reads back."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        for p in pods:
            out.writerow(
                [p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.gpu_models)]
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--base", default="default")
    parser.add_argument("--family", action="append", dest="families", choices=list(FAMILY_LEVELS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        print(f"the openb trace is not at {args.data}: give --data DIR", file=sys.stderr)
        return 2
    base = load_pods(args.data / f"openb_pod_list_{args.base}.csv")
    nodes = openb_nodes(args.data)
    table = Table(title=f"openb_pod_list_{args.base} variants (seed {args.seed}): shares in %")
    for column in ("variant", "pods", *shares(base)):
        table.add_column(column, justify="left" if column == "variant" else "right")
    table.add_row(args.base, str(len(base)), *(f"{v:.1f}" for v in shares(base).values()))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    for variant in variants(args.families or ()):
        pods = generate(base, nodes, variant, args.seed)
        table.add_row(variant.name, str(len(pods)), *(f"{v:.1f}" for v in shares(pods).values()))
        if args.out:
            write_pods(args.out / f"openb_pod_list_{variant.name}.csv", pods)
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
