"""`gpuplex simulate --arrivals stream`: the pods arrive and leave one event at a time
(`gpuplex.replay.stream`): each placed by the policy or failed, never retried, each placed pod
leaving after a stay drawn from its trace runtime. The stream is drawn from the trace's whole-GPU
pods with each seed; the same stream can go through kube-scheduler and gpuplex's scheduler
extender (tests/kube_real/test_scheduler_extender.py) to compare.

A table on stdout (per policy: mean GPU allocation over the stream's events, failed pods; means
over the seeds) and `stream.csv` (per policy and seed) in --out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import reported
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.replay.openb import load_nodes, load_timed_pods
from gpuplex.replay.stream import StreamResult, openb_stream, replay_stream

out = stdout_console()
err = stderr_console()

#: the stream's size and pace when the command line does not say
STREAM_PODS = 300
STREAM_SPACING = 10


def simulate_stream(
    nodes_csv: Path,
    pods_csv: Path,
    *,
    policies: Sequence[str],
    seeds: Sequence[int],
    pods: int,
    spacing: int,
    out_dir: Path,
) -> list[tuple[int, StreamResult]]:
    with reported():
        nodes = load_nodes(nodes_csv)
        timed = load_timed_pods(pods_csv)
        streams = {
            seed: openb_stream(timed, pods=pods, seed=seed, spacing=spacing) for seed in seeds
        }
    results = [
        (seed, replay_stream(nodes, streams[seed], policy)) for policy in policies for seed in seeds
    ]
    table = Table(
        title=f"{pods} pods arriving and leaving, mean over {len(seeds)} seed(s)",
        title_justify="left",
    )
    for column in ("policy", "GPU allocation %", "failed pods"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for policy in policies:
        mine = [r for _, r in results if r.policy == policy]
        allocation = sum(r.allocation_percent for r in mine) / len(mine)
        failed = sum(r.failed for r in mine) / len(mine)
        table.add_row(policy, f"{allocation:.1f}", f"{failed:.1f}")
    out.print(table)
    lines = ["policy,seed,allocation_percent,failed_pods,placed_pods,capacity_gpus"]
    lines += [
        f"{r.policy},{seed},{r.allocation_percent:.3f},{r.failed},{len(r.placed)},{r.capacity_gpus}"
        for seed, r in results
    ]
    path = out_dir / "stream.csv"
    try:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    except OSError as error:
        raise typer.BadParameter(
            f"cannot write {path}: {error.strerror}", param_hint="--out"
        ) from None
    err.print(f"wrote {escape(str(path))}", highlight=False, soft_wrap=True)
    return results
