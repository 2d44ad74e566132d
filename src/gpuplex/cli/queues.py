"""`gpuplex queues FILE.yaml`: a what-if over the queues, decided by the job runner's own rules.

The file is the spec's `queues:` section plus the capacity, what runs, what waits and what was
used before (`gpuplex.core.queues.what_if`; see `examples/queues/two-orgs.yaml`). The command
prints each queue's guarantee, limit, weight, what it holds now, its tenants' past use (decayed
with the half-life) and its fair share, then one admission round's answer for each pending
workload: it starts, it preempts these, or it waits and why, in the words `gpuplex job show`
would use. `--json` prints the same for scripts.

Exit 0 when it ran, whatever the answers; a bad file exits 2 with file:line:column, the field
path and what is wrong (read with the spec file's YAML reader, validated in the pure core).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from gpuplex.cli.conventions import reported
from gpuplex.consoles import stdout_console

if TYPE_CHECKING:
    from gpuplex.core.queues.drf import Resources
    from gpuplex.core.queues.what_if import Answer, QueueRow, WhatIf, WhatIfReport

out = stdout_console()


def queues_command(
    file: Annotated[
        Path, typer.Argument(help="The queues what-if YAML to read.", show_default=False)
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the answers as JSON (stable keys).")
    ] = False,
) -> None:
    """What-if over the queues: guarantees, fair shares, and why each job would wait."""
    from gpuplex.core.queues.what_if import evaluate

    with reported():
        report = evaluate(load_what_if(file))
    if as_json:
        sys.stdout.write(json.dumps(report_as_json(report), indent=2) + "\n")
        return
    out.print(queues_table(report))
    out.print(pending_table(report))
    for part in pending_details(report):
        out.print(part, highlight=False)


def load_what_if(path: Path) -> WhatIf:
    """Read and validate the file; every problem is a SpecError with file:line:column."""
    from gpuplex.core.queues.what_if import parse_what_if
    from gpuplex.specfile import load_yaml_file

    return load_yaml_file(path, parse_what_if)


# --- JSON -------------------------------------------------------------------------------------


def report_as_json(report: WhatIfReport) -> dict[str, object]:
    return {
        "capacity": _kinds(report.capacity),
        "half_life_s": report.half_life_s,
        "queues": [_queue_json(row) for row in report.queues],
        "pending": [_answer_json(answer) for answer in report.pending],
    }


def _queue_json(row: QueueRow) -> dict[str, object]:
    from gpuplex.core.queues.drf import EPSILON

    standing = row.standing
    limits = {k.kind: k.limit for k in standing.kinds if k.limit is not None}
    return {
        "name": standing.name,
        "level": standing.level,
        "parent": standing.parent,
        "depth": standing.depth,
        "weight": standing.weight,
        "lends": standing.lends,
        "borrows": standing.borrows,
        "guarantee": {k.kind: k.guarantee for k in standing.kinds if k.guarantee > EPSILON},
        "limit": limits or None,
        "holds": {k.kind: k.in_use for k in standing.kinds if k.in_use > EPSILON},
        "borrowed": {k.kind: k.borrowed for k in standing.kinds if k.borrowed > EPSILON},
        "past_use": _kinds(row.past_use),
        "fair_share": _kinds(row.fair_share),
    }


def _answer_json(answer: Answer) -> dict[str, object]:
    return {
        "name": answer.job.id,
        "tenant": answer.job.tenant,
        "asks": _kinds(answer.job.ask),
        "priority": answer.job.priority,
        "outcome": answer.outcome,
        "starts": answer.starts,
        "reason": answer.reason,
        "victims": [{"name": name, "tenant": tenant} for name, tenant in answer.victims],
        "reserved": _kinds(answer.reserved),
    }


def _kinds(amounts: Resources) -> dict[str, float]:
    """The kinds of more than nothing, in a fixed order, float dust rounded away."""
    from gpuplex.core.queues.drf import EPSILON
    from gpuplex.core.queues.standing import kind_order

    return {
        kind: round(amounts[kind], 6) + 0.0
        for kind in sorted(amounts, key=kind_order)
        if amounts[kind] > EPSILON
    }


# --- tables -----------------------------------------------------------------------------------


def queues_table(report: WhatIfReport) -> Table:
    capacity = _amounts(report.capacity)
    memory = f"half-life {_number(report.half_life_s)} s"
    table = Table(title=escape(f"Queues on {capacity} ({memory})"), title_justify="left")
    headers = ("queue", "guarantee", "limit", "weight", "holds now", "past use", "fair share")
    for header in headers:
        table.add_column(header, justify="left" if header == "queue" else "right")
    for row in report.queues:
        standing = row.standing
        name = "  " * standing.depth + standing.name
        name += "" if standing.level == "tenant" else "/"
        limits = {k.kind: k.limit for k in standing.kinds if k.limit is not None}
        table.add_row(
            escape(name),
            _amounts({k.kind: k.guarantee for k in standing.kinds}),
            _amounts(limits) if limits else "-",
            _number(standing.weight),
            _amounts({k.kind: k.in_use for k in standing.kinds}),
            _amounts(row.past_use) if standing.level == "tenant" else "",
            _amounts(row.fair_share),
        )
    return table


def pending_table(report: WhatIfReport) -> Table:
    """One row a pending workload: what it asks and the admission round's answer for it."""
    table = Table(title="Pending workloads: one admission round", title_justify="left")
    table.add_column("workload", no_wrap=True)
    table.add_column("tenant")
    table.add_column("asks", justify="right")
    table.add_column("priority", justify="right")
    table.add_column("answer", no_wrap=True)
    table.add_column("preempts")
    for answer in report.pending:
        style = {"starts": "green", "preempts": "cyan"}.get(answer.outcome, "yellow")
        table.add_row(
            escape(answer.job.id),
            escape(answer.job.tenant),
            _amounts(answer.job.ask),
            str(answer.job.priority),
            f"[{style}]{answer.outcome}[/]",
            escape(", ".join(f"{name} ({tenant})" for name, tenant in answer.victims)) or "-",
        )
    return table


def pending_details(report: WhatIfReport) -> Iterator[RenderableType]:
    """For each pending workload: its answer in words."""
    for answer in report.pending:
        yield Text.assemble((answer.job.id, "bold"), f" ({answer.outcome})")
        yield Padding(Text(answer.reason), (0, 0, 0, 2))


def _amounts(amounts: Resources) -> str:
    from gpuplex.core.queues.drf import EPSILON
    from gpuplex.core.queues.standing import kind_order

    kinds = [kind for kind in sorted(amounts, key=kind_order) if amounts[kind] > EPSILON]
    return escape(", ".join(f"{kind} {_number(amounts[kind])}" for kind in kinds) or "0")


def _number(value: float) -> str:
    """8, 2.5, 0.33: as people write it."""
    if abs(value - round(value)) < 1e-6:
        return str(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")
