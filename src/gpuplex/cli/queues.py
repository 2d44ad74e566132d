"""`gpuplex queues FILE.yaml`: a what-if over hierarchical quota queues.

The file gives the capacity, the queue tree (organisation -> team -> tenant: guarantee, limit,
weight), what runs and what waits (see `examples/queues/two-orgs.yaml`). The command prints each
queue's guarantee, limit, weight, what it holds now and its fair share (weighted DRF, with each
tenant demanding what it holds plus its pending asks), then for each pending workload why it
waits, or that it starts, and what would have to change. `--json` prints the same for scripts.

Exit 0 when it ran, whatever the answers; a bad file exits 2 with file:line:column, the field
path and what is wrong (read with the spec file's YAML reader, validated in the pure core).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuplex.cli.conventions import reported
from gpuplex.consoles import stdout_console
from gpuplex.core.queues.drf import Resources
from gpuplex.core.queues.pending import PendingAnswer
from gpuplex.core.queues.queue_file import (
    PendingRow,
    QueueReport,
    QueueRow,
    QueueScenario,
    evaluate,
    parse_queue_file,
)
from gpuplex.specfile import load_yaml_file

out = stdout_console()


def queues_command(
    file: Annotated[
        Path, typer.Argument(help="The queues what-if YAML to read.", show_default=False)
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the answers as JSON (stable keys).")
    ] = False,
) -> None:
    """What-if over quota queues: guarantees, limits, fair shares, and why work waits."""
    with reported():
        report = evaluate(load_queue_file(file))
    if as_json:
        sys.stdout.write(json.dumps(report_as_json(report), indent=2) + "\n")
        return
    out.print(queues_table(report))
    out.print(pending_table(report))
    for part in pending_details(report):
        out.print(part, highlight=False)


def load_queue_file(path: Path) -> QueueScenario:
    """Read and validate the file; every problem is a SpecError with file:line:column."""
    return load_yaml_file(path, parse_queue_file)


# --- JSON -------------------------------------------------------------------------------------


def report_as_json(report: QueueReport) -> dict[str, object]:
    return {
        "capacity": dict(report.capacity),
        "min_runtime_s": report.min_runtime_s,
        "queues": [_queue_json(row) for row in report.queues],
        "pending": [_pending_json(row) for row in report.pending],
    }


def _queue_json(row: QueueRow) -> dict[str, object]:
    return {
        "name": row.name,
        "parent": row.parent,
        "depth": row.depth,
        "tenant": row.is_tenant,
        "guarantee": dict(row.guarantee),
        "limit": None if row.limit is None else dict(row.limit),
        "weight": row.weight,
        "holds": dict(row.holds),
        "fair_share": dict(row.fair_share),
    }


def _pending_json(row: PendingRow) -> dict[str, object]:
    answer = row.answer
    return {
        "name": row.workload.name,
        "tenant": row.workload.tenant,
        "asks": dict(row.workload.resources),
        "starts": answer.starts,
        **_answer_json(answer),
        "victims": [{"name": v.name, "tenant": v.tenant} for v in answer.victims],
        "wait_s": answer.wait_s,
        "also": [_answer_json(other) for other in answer.also],
    }


def _answer_json(answer: PendingAnswer) -> dict[str, object]:
    return {
        "code": answer.code,
        "queue": answer.queue,
        "resource": answer.resource,
        "used": answer.used,
        "asked": answer.asked,
        "bound": answer.bound,
        "reason": answer.reason,
        "change": answer.change,
    }


# --- tables -----------------------------------------------------------------------------------


def queues_table(report: QueueReport) -> Table:
    capacity = ", ".join(f"{_number(a)} {r}" for r, a in report.capacity.items())
    table = Table(title=escape(f"Queues on {capacity}"), title_justify="left")
    for header in ("queue", "guarantee", "limit", "weight", "holds now", "fair share"):
        table.add_column(header, justify="left" if header == "queue" else "right")
    for row in report.queues:
        name = "  " * (row.depth - 1) + row.name + ("" if row.is_tenant else "/")
        table.add_row(
            escape(name),
            _amounts(row.guarantee),
            "-" if row.limit is None else _amounts(row.limit),
            _number(row.weight),
            _amounts(row.holds),
            _amounts(row.fair_share),
        )
    return table


def pending_table(report: QueueReport) -> Table:
    """One row a pending workload: its answer code, the queue and resource the answer is about
    ("cluster" for the capacity) and its numbers."""
    title = f"Pending workloads (minimum runtime before reclaim: {_number(report.min_runtime_s)} s)"
    table = Table(title=title, title_justify="left")
    table.add_column("workload", no_wrap=True)
    table.add_column("tenant")
    table.add_column("asks", justify="right")
    table.add_column("answer", no_wrap=True)
    table.add_column("at")
    table.add_column("holds/asks/bound", justify="right", no_wrap=True)
    for row in report.pending:
        answer = row.answer
        where = answer.queue + (f" / {answer.resource}" if answer.resource else "")
        numbers = (answer.used, answer.asked, answer.bound)
        shown = " / ".join(_number(n) for n in numbers if n is not None) or "-"
        style = "green" if answer.starts else "yellow"
        table.add_row(
            escape(row.workload.name),
            escape(row.workload.tenant),
            _amounts(row.workload.resources),
            f"[{style}]{escape(answer.code)}[/]",
            escape(where),
            shown,
        )
    return table


def pending_details(report: QueueReport) -> Iterator[RenderableType]:
    """For each pending workload: the reason and the change (which names the workloads it
    preempts, or waits to preempt), then what else blocks."""
    for row in report.pending:
        answer = row.answer
        yield Text.assemble((row.workload.name, "bold"), f" ({answer.code})")
        lines = [answer.reason, answer.change]
        lines += [f"Also ({other.code}): {other.reason}" for other in answer.also]
        yield from (Padding(Text(line), (0, 0, 0, 2)) for line in lines)


def _amounts(amounts: Resources) -> str:
    shown = [f"{r} {_number(a)}" for r, a in amounts.items() if a]
    return escape(", ".join(shown) or "0")


def _number(value: float) -> str:
    """8, 2.5, 0.33: as people write it."""
    if abs(value - round(value)) < 1e-6:
        return str(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")
