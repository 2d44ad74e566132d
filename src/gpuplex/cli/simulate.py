"""`gpuplex simulate`: replay a cluster trace (openb node and pod CSVs) under placement policies and
report how much of the cluster's GPU capacity each one allocates as demand arrives.

    gpuplex simulate --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
        --policy best-fit --policy random --seeds 10 --out simulate-out

A progress bar on stderr while the replays run; then a table of the mean allocation ratio at a few
arrived-demand points on stdout, and `simulate.csv` and `simulate.png` in --out. The replay and the
plot libraries (numpy, matplotlib) are imported when the command runs, not with the CLI. matplotlib
comes with the `plots` extra (`pip install 'gpuplex[plots]'`); without it the command says so
before replaying anything, except with --compare-isolation, which draws no plot.

With --compare-isolation the policies are not compared: the same trace is replayed (with best-fit,
or the first --policy) once per isolation mode, each fractional pod taking what a dedicated GPU, a
MIG instance, an MPS share or time-slice replicas reserve (see `gpuplex.replay.isolation_compare`);
the table and `isolation.csv` give GPUs needed, allocation ratios and stranded memory per mode.

With --arrivals trace --tenants FILE the pods arrive and leave in time through the queue rules
(`gpuplex.cli.simulate_jobs`), ending with gpuplex's choice of policy for the fleet replayed;
with --arrivals stream they arrive and leave one event at a time,
each placed or failed (`gpuplex.cli.simulate_stream`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import reported
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.errors import NotFoundError, TraceInputError
from gpuplex.extras import require_extra

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from gpuplex.core.trace import TraceNode, TracePod
    from gpuplex.replay.isolation_compare import ModeSummary
    from gpuplex.replay.placement import ReplayResult
    from gpuplex.replay.placement_report import ReportRow

out = stdout_console()
err = stderr_console()

#: The PNG each kind of arrivals draws (matplotlib, the `plots` extra); --compare-isolation none.
_PLOTS = {"inflate": "simulate.png", "trace": "jobs.png"}

_T = TypeVar("_T")
_Name = TypeVar("_Name", bound=str)  # a policy name or an IsolationMode


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
            "--policy",
            help=(
                "A placement policy, repeatable: random, first-fit, best-fit, gpu-packing, "
                "dot-product, fgd, or gpuplex's own fgd-balanced."
            ),
            show_default="all of them",
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
        Path,
        typer.Option(
            "--out",
            file_okay=False,
            help="Where simulate.csv and .png (or isolation.csv, or jobs.csv and .png) go.",
        ),
    ] = Path("simulate-out"),
    compare_isolation: Annotated[
        bool,
        typer.Option(
            "--compare-isolation",
            help=(
                "Instead of comparing policies, replay the trace once per isolation mode "
                "(dedicated GPU, MIG as on an A100, MPS, time-slicing), each fractional pod "
                "taking what that mode reserves, with best-fit or the first --policy; print GPUs "
                "needed, allocation and stranded memory and write isolation.csv."
            ),
        ),
    ] = False,
    time_slice_replicas: Annotated[
        int | None,
        typer.Option(
            min=2,
            max=1000,
            help="With --compare-isolation: time-slicing replicas a GPU (a pod takes whole ones).",
            show_default="4",
        ),
    ] = None,
    arrivals: Annotated[
        str,
        typer.Option(
            help=(
                "inflate: pods arrive one by one and never leave (the FGD paper's replay); "
                "trace: pods arrive and leave at the trace's times through the queue rules of "
                "--tenants, compared with FIFO (jobs.csv, jobs.png); stream: whole-GPU pods "
                "drawn from the trace arrive and leave one event at a time, placed or failed "
                "(stream.csv)."
            ),
        ),
    ] = "inflate",
    tenants: Annotated[
        Path | None,
        typer.Option(
            "--tenants",
            exists=True,
            dir_okay=False,
            readable=True,
            help="With --arrivals trace: the queues: tree and which pods are whose (YAML).",
        ),
    ] = None,
    speedup: Annotated[
        float,
        typer.Option(
            min=0.001, help="With --arrivals trace: arrival times divided by this (more load)."
        ),
    ] = 1.0,
    stream_pods: Annotated[
        int | None,
        typer.Option(min=1, max=1_000_000, help="With --arrivals stream: pods in the stream."),
    ] = None,
    stream_spacing: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=1_000_000,
            help="With --arrivals stream: a pod of the trace's median runtime stays this many "
            "arrivals.",
        ),
    ] = None,
) -> None:
    """Replay a cluster trace under placement policies and compare them.

    Prints the GPU allocation ratio as demand arrives and writes simulate.csv and simulate.png.
    With --compare-isolation, compares isolation modes instead and writes isolation.csv."""
    from gpuplex.replay.openb import load_nodes, load_pods
    from gpuplex.replay.placement import POLICY_NAMES
    from gpuplex.replay.placement_report import aggregate

    if time_slice_replicas is not None and not compare_isolation:
        raise typer.BadParameter(
            "only applies with --compare-isolation", param_hint="--time-slice-replicas"
        )
    if arrivals not in ("inflate", "trace", "stream"):
        raise typer.BadParameter("inflate, trace or stream", param_hint="--arrivals")
    if arrivals != "stream" and (stream_pods is not None or stream_spacing is not None):
        raise typer.BadParameter(
            "only applies with --arrivals stream", param_hint="--stream-pods / --stream-spacing"
        )
    if arrivals == "stream":
        from gpuplex.cli.simulate_stream import STREAM_PODS, STREAM_SPACING, simulate_stream

        if tenants is not None or speedup != 1.0 or compare_isolation:
            raise typer.BadParameter(
                "not with --arrivals stream",
                param_hint="--tenants / --speedup / --compare-isolation",
            )
        with reported():
            picked = _policies(policy or ["best-fit"], POLICY_NAMES)
        _make_out_dir(out_dir)
        simulate_stream(
            nodes,
            pods,
            policies=picked,
            seeds=list(range(first_seed, first_seed + seeds)),
            pods=stream_pods or STREAM_PODS,
            spacing=stream_spacing or STREAM_SPACING,
            out_dir=out_dir,
        )
        return
    if arrivals == "inflate" and (tenants is not None or speedup != 1.0):
        raise typer.BadParameter(
            "only applies with --arrivals trace", param_hint="--tenants / --speedup"
        )
    if arrivals == "trace" or not compare_isolation:  # plotted after the replays: check before
        with reported():
            require_extra("plots", f"gpuplex simulate's plot ({_PLOTS[arrivals]})")
    if arrivals == "trace":
        if tenants is None:
            raise typer.BadParameter("--arrivals trace needs one", param_hint="--tenants")
        from gpuplex.cli.simulate_jobs import simulate_trace_arrivals

        with reported():
            picked = _policies(policy, POLICY_NAMES) if policy else []
        _make_out_dir(out_dir)
        simulate_trace_arrivals(
            nodes, pods, tenants, policies=picked, seed=first_seed, speedup=speedup, out_dir=out_dir
        )
        return
    with reported():
        chosen = _policies(policy, POLICY_NAMES)
        trace_nodes = load_nodes(nodes)
        trace_pods = load_pods(pods)
        if not any(node.gpus for node in trace_nodes):
            raise TraceInputError(f"{nodes}: no node has a GPU, so there is nothing to allocate")
    seed_list = list(range(first_seed, first_seed + seeds))
    _make_out_dir(out_dir)  # before the replays, which take minutes on a real trace
    if compare_isolation:
        _compare_isolation(
            trace_nodes,
            trace_pods,
            policy=chosen[0] if policy else "best-fit",
            seeds=seed_list,
            inflate=inflate,
            replicas=time_slice_replicas or 4,
            out_dir=out_dir,
        )
        return
    results = _replay_all(trace_nodes, trace_pods, chosen, seed_list, inflate)
    rows = aggregate(results)
    out.print(allocation_table(rows, chosen, seeds=len(seed_list)))
    _write_outputs(rows, out_dir, seeds=len(seed_list))


def _policies(asked: list[str] | None, known: Sequence[str]) -> list[str]:
    from gpuplex.core.spec.parse import did_you_mean

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
    from gpuplex.replay.placement import replay

    return _each_with_progress(
        [(name, seed) for name in policies for seed in seeds],
        lambda name, seed, on_progress: replay(
            nodes, pods, name, seed=seed, inflate=inflate, on_progress=on_progress
        ),
    )


def _each_with_progress(
    runs: Sequence[tuple[_Name, int]], one: Callable[[_Name, int, Callable[[int, int], None]], _T]
) -> list[_T]:
    """`one(name, seed, on_progress)` for each run, one bar over all of them."""
    results: list[_T] = []
    with _progress() as progress:
        task = progress.add_task("replaying", total=len(runs))
        for run, (name, seed) in enumerate(runs):
            progress.update(task, description=f"{name} seed {seed} (run {run + 1}/{len(runs)})")
            results.append(one(name, seed, _advance(progress, task, run=run)))
            progress.update(task, completed=run + 1)
    return results


def _progress() -> Progress:
    from rich.progress import (  # only while a replay runs, not for every command's start-up
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    )


def _advance(progress: Progress, task: TaskID, *, run: int) -> Callable[[int, int], None]:
    """The replay's (pods done, pods in the run) as a fraction of run number `run` on the bar."""

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=run + (done / total if total else 1.0))

    return on_progress


def allocation_table(rows: Sequence[ReportRow], policies: Sequence[str], *, seeds: int) -> Table:
    """Mean GPU allocation ratio (%) per policy at each of TABLE_POINTS % arrived demand."""
    from gpuplex.replay.placement_report import TABLE_POINTS, means_at

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


@contextmanager
def _writing(target: Path) -> Iterator[None]:
    """An output that cannot be written is a usage error naming the file, not a traceback."""
    try:
        yield
    except OSError as error:
        raise typer.BadParameter(
            f"cannot write {error.filename or target}: {error.strerror}", param_hint="--out"
        ) from None


def _write_outputs(rows: Sequence[ReportRow], out_dir: Path, *, seeds: int) -> None:
    from gpuplex.cli.simulate_plot import write_plot
    from gpuplex.replay.placement_report import csv_text

    csv_path = out_dir / "simulate.csv"
    png_path = out_dir / "simulate.png"
    with _writing(out_dir):
        csv_path.write_text(csv_text(rows), encoding="utf-8")
        write_plot(rows, png_path, seeds=seeds)
    err.print(
        f"wrote {escape(str(csv_path))} and {escape(str(png_path))}",
        highlight=False,
        soft_wrap=True,
    )


def _compare_isolation(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    *,
    policy: str,
    seeds: Sequence[int],
    inflate: float,
    replicas: int,
    out_dir: Path,
) -> None:
    from gpuplex.replay.isolation_compare import MODES, compare_mode, csv_text, summarise

    results = _each_with_progress(
        [(mode, seed) for mode in MODES for seed in seeds],
        lambda mode, seed, on_progress: compare_mode(
            nodes,
            pods,
            mode,
            seed=seed,
            policy=policy,
            inflate=inflate,
            time_slice_replicas=replicas,
            on_progress=on_progress,
        ),
    )
    rows = summarise(results)
    gpus = sum(node.gpus for node in nodes)
    out.print(isolation_table(rows, policy=policy, seeds=len(seeds), gpus=gpus))
    out.print(isolation_notes(replicas), highlight=False, soft_wrap=True)
    csv_path = out_dir / "isolation.csv"
    with _writing(csv_path):
        csv_path.write_text(csv_text(rows), encoding="utf-8")
    err.print(f"wrote {escape(str(csv_path))}", highlight=False, soft_wrap=True)


def isolation_table(rows: Sequence[ModeSummary], *, policy: str, seeds: int, gpus: int) -> Table:
    """Per isolation mode: GPUs needed and the allocation at 100 % arrived, failures at the end."""
    from gpuplex.replay.isolation_compare import vs_dedicated

    table = Table(
        title=(
            f"Isolation modes with {policy} on {gpus} GPUs, mean over {seeds} seed(s): "
            "at 100 % of capacity arrived (and at the end)"
        ),
        title_justify="left",
    )
    for header in (
        "mode",
        "GPUs in use",
        "GPUs needed",
        "x dedicated",
        "asked alloc %",
        "reserved %",
        "stranded mem (GPUs)",
        "stranded mem %",
        "failed pods",
        "asked alloc % (end)",
        "failed pods (end)",
    ):
        table.add_column(header, justify="left" if header == "mode" else "right")
    ends = {row.mode: row for row in rows if row.at == "end"}
    for row in rows:
        if row.at != "100%":
            continue
        ratio = vs_dedicated(rows, row)
        end = ends[row.mode]
        table.add_row(
            row.mode.value,
            f"{row.gpus_in_use:.1f}",
            f"{row.gpus_needed:.1f}",
            "-" if ratio is None else f"{ratio:.3f}",
            f"{row.asked_percent:.2f}",
            f"{row.reserved_percent:.2f}",
            f"{row.stranded_memory_gpus:.1f}",
            f"{row.stranded_memory_percent:.2f}",
            f"{row.failed_pods:.1f}",
            f"{end.asked_percent:.2f}",
            f"{end.failed_pods:.1f}",
        )
    return table


def isolation_notes(replicas: int) -> str:
    """What the table's modes and columns mean (printed under it)."""
    return "\n".join(
        (
            "Each fractional pod takes what its mode reserves; whole-GPU pods are unchanged.",
            "  dedicated: a whole GPU.",
            "  mig: the smallest A100-40GB MIG profile holding the share on compute (sevenths) "
            "and memory (eighths): 1g.5gb <=125, 1g.10gb <=142, 2g.10gb <=250, 3g.20gb <=428, "
            "4g.20gb <=500 milli, else a whole GPU; placed by MIG's placement rules. The trace's "
            "GPUs have no MIG: this is 'if they could be partitioned like an A100'.",
            "  mps: the share rounded up to a whole percent of compute and of memory "
            "(pinned memory limit), at most 48 clients a GPU.",
            f"  time-slice: whole replicas of {replicas} per GPU (share rounded up to k/{replicas});"
            " a replica reserves no memory and nothing is isolated (memory, faults); all "
            f"{replicas} replicas hold the whole GPU.",
            "GPUs in use: GPUs holding a pod when the arrived request (as asked) reaches 100 % of "
            "capacity; GPUs needed: those plus the failed pods' reservations packed onto more "
            "GPUs (a lower bound); x dedicated: GPUs needed over the dedicated mode's.",
            "asked alloc %: what placed pods asked for, of capacity (useful work); reserved %: what "
            "the mode took for them. Stranded memory: GPU memory reserved beyond placed pods' "
            "need (a pod needs its share of its GPU's memory), in GPUs' worth and % of all GPU "
            "memory.",
        )
    )
