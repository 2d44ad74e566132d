"""`gpuplex simulate`: replay a cluster trace (openb node and pod CSVs) under placement policies and
report how much of the cluster's GPU capacity each one allocates as demand arrives.

    gpuplex simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
        --policy best-fit --policy random --seeds 10 --out simulate-out

A progress bar on stderr while the replays run; then a table of the mean allocation ratio at a few
arrived-demand points on stdout, and `simulate.csv` and `simulate.png` in --out. The replay and the
plot libraries (numpy, matplotlib) are imported when the command runs, not with the CLI."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from gpuplex.cli.conventions import reported
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.errors import NotFoundError, TraceInputError
from gpuplex.sim.replay_report import TABLE_POINTS, ReportRow, aggregate, csv_text, means_at

if TYPE_CHECKING:
    from gpuplex.core.plan.cluster.model import TraceNode, TracePod
    from gpuplex.sim.replay import ReplayResult

out = Console()
err = Console(stderr=True)


def simulate_command(
    nodes: Annotated[
        Path,
        typer.Option(
            "--nodes", exists=True, dir_okay=False, readable=True, help="Node CSV (openb format)."
        ),
    ],
    pods: Annotated[
        Path,
        typer.Option(
            "--pods", exists=True, dir_okay=False, readable=True, help="Pod CSV (openb format)."
        ),
    ],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy", help="A placement policy; repeat for more.", show_default="all of them"
        ),
    ] = None,
    seeds: Annotated[
        int,
        typer.Option(
            min=1, help="How many seeds to replay each policy with (the paper: 10, seeds 42..51)."
        ),
    ] = 1,
    first_seed: Annotated[
        int, typer.Option(min=0, help="The first seed; the next ones count up.")
    ] = 42,
    inflate: Annotated[
        float,
        typer.Option(
            min=0.01, max=10.0, help="Replay pods until this many times the capacity arrived."
        ),
    ] = 1.3,
    out_dir: Annotated[
        Path, typer.Option("--out", file_okay=False, help="Where simulate.csv and .png go.")
    ] = Path("simulate-out"),
) -> None:
    """Replay a cluster trace under placement policies; print the GPU allocation ratio as demand
    arrives and write simulate.csv and simulate.png."""
    from gpuplex.sim.openb import load_nodes, load_pods
    from gpuplex.sim.replay import POLICY_NAMES

    with reported():
        chosen = _policies(policy, POLICY_NAMES)
        trace_nodes = load_nodes(nodes)
        trace_pods = load_pods(pods)
        if not any(node.gpus for node in trace_nodes):
            raise TraceInputError(f"{nodes}: no node has a GPU, so there is nothing to allocate")
    seed_list = list(range(first_seed, first_seed + seeds))
    _make_out_dir(out_dir)  # before the replays, which take minutes on a real trace
    results = _replay_all(trace_nodes, trace_pods, chosen, seed_list, inflate)
    rows = aggregate(results)
    out.print(allocation_table(rows, chosen, seeds=len(seed_list)))
    _write_outputs(rows, out_dir, seeds=len(seed_list))


def _policies(asked: list[str] | None, known: Sequence[str]) -> list[str]:
    if not asked:
        return list(known)
    for name in asked:
        if name not in known:
            hint = did_you_mean(name, list(known))
            raise NotFoundError(f"unknown policy {name!r}{hint}; policies: {', '.join(known)}")
    return list(dict.fromkeys(asked))


def _replay_all(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policies: Sequence[str],
    seeds: Sequence[int],
    inflate: float,
) -> list[ReplayResult]:
    from gpuplex.sim.replay import replay

    runs = [(name, seed) for name in policies for seed in seeds]
    results: list[ReplayResult] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("replaying", total=len(runs))
        for run, (name, seed) in enumerate(runs):
            progress.update(task, description=f"{name} seed {seed} (run {run + 1}/{len(runs)})")
            on_progress = _advance(progress, task, run=run)
            results.append(
                replay(nodes, pods, name, seed=seed, inflate=inflate, on_progress=on_progress)
            )
            progress.update(task, completed=run + 1)
    return results


def _advance(progress: Progress, task: TaskID, *, run: int) -> Callable[[int, int], None]:
    """The replay's (pods done, pods in the run) as a fraction of run number `run` on the bar."""

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=run + (done / total if total else 1.0))

    return on_progress


def allocation_table(rows: Sequence[ReportRow], policies: Sequence[str], *, seeds: int) -> Table:
    """Mean GPU allocation ratio (%) per policy at each of TABLE_POINTS % arrived demand."""
    table = Table(
        title=f"GPU allocation ratio (%) by arrived GPU demand, mean over {seeds} seed(s)",
        title_justify="left",
    )
    table.add_column("policy")
    for point in TABLE_POINTS:
        table.add_column(f"{point}%", justify="right")
    for name in policies:
        cells = [
            "-" if value is None else f"{value:.2f}" for value in means_at(rows, name, TABLE_POINTS)
        ]
        table.add_row(name, *cells)
    return table


def _make_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise typer.BadParameter(
            f"cannot create {out_dir}: {error.strerror}", param_hint="--out"
        ) from None


def _write_outputs(rows: Sequence[ReportRow], out_dir: Path, *, seeds: int) -> None:
    from gpuplex.cli.simulate_plot import write_plot

    csv_path = out_dir / "simulate.csv"
    png_path = out_dir / "simulate.png"
    try:
        csv_path.write_text(csv_text(rows), encoding="utf-8")
        write_plot(rows, png_path, seeds=seeds)
    except OSError as error:
        raise typer.BadParameter(
            f"cannot write {error.filename or out_dir}: {error.strerror}", param_hint="--out"
        ) from None
    err.print(
        f"wrote {escape(str(csv_path))} and {escape(str(png_path))}",
        highlight=False,
        soft_wrap=True,
    )
