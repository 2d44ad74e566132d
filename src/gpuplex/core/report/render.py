"""Statements as CSV text and as plain JSON-ready dicts. Money and quantities are written as decimal
strings ("39.00"), never floats; times as ISO 8601 UTC.

A statement's jobs (their part of its allocation lines, already in its total) come after its
`Total` row in CSV, one row per job and dimension described `Job <id> (<name>), in the lines above`,
and under `jobs` in JSON."""

from __future__ import annotations

import csv
from decimal import Decimal
from typing import Any

from gpuplex.core.report.statement import FleetStatement, JobCharge, LineItem, Statement

CSV_COLUMNS = (
    "tenant",
    "period_start",
    "period_end",
    "currency",
    "description",
    "dimension",
    "quantity",
    "unit",
    "unit_price",
    "amount",
)
#: The `tenant` column of fleet-wide rows in a fleet statement.
PLATFORM = "(platform)"


class _CsvText:
    """What csv.writer writes into: the rows as text (core does no I/O, so no io.StringIO)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)


def _text(value: Decimal) -> str:
    return f"{value:f}"


def _row(owner: str, statement: Statement | FleetStatement, item: LineItem) -> list[str]:
    return [
        owner,
        statement.period_start.isoformat(),
        statement.period_end.isoformat(),
        statement.currency,
        item.description,
        item.dimension,
        _text(item.quantity),
        item.unit,
        _text(item.unit_price),
        _text(item.amount),
    ]


def _total_row(
    owner: str, statement: Statement | FleetStatement, description: str, amount: Decimal
) -> list[str]:
    return [
        owner,
        statement.period_start.isoformat(),
        statement.period_end.isoformat(),
        statement.currency,
        description,
        "",
        "",
        "",
        "",
        _text(amount),
    ]


def job_description(job: JobCharge) -> str:
    """`Job j1a2b3c4d (train)`, or without a name `Job j1a2b3c4d`."""
    return f"Job {job.job_id}" + (f" ({job.name})" if job.name else "")


def _job_row(statement: Statement, job: JobCharge) -> list[str]:
    return [
        statement.tenant,
        statement.period_start.isoformat(),
        statement.period_end.isoformat(),
        statement.currency,
        f"{job_description(job)}, in the lines above",
        job.dimension,
        _text(job.quantity),
        job.unit,
        _text(job.unit_price),
        _text(job.amount),
    ]


def _statement_rows(statement: Statement) -> list[list[str]]:
    rows = [_row(statement.tenant, statement, item) for item in statement.lines]
    rows.append(_total_row(statement.tenant, statement, "Total", statement.total))
    rows += [_job_row(statement, job) for job in statement.jobs]
    return rows


def _csv(rows: list[list[str]]) -> str:
    out = _CsvText()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows(rows)
    return "".join(out.parts)


def statement_csv(statement: Statement) -> str:
    """One row per line item, then a `Total` row, then one row per job and dimension (a
    breakdown of the lines above, not added to the total)."""
    return _csv(_statement_rows(statement))


def fleet_statement_csv(fleet: FleetStatement) -> str:
    """Every tenant's rows, then the platform's: idle capacity, the capacity lines, the fleet cost,
    and token charges when there are any."""
    rows = [row for statement in fleet.tenants for row in _statement_rows(statement)]
    rows.append(_total_row(PLATFORM, fleet, "Idle capacity", fleet.idle))
    rows += [_row(PLATFORM, fleet, item) for item in fleet.capacity]
    rows.append(_total_row(PLATFORM, fleet, "Fleet cost", fleet.fleet_cost))
    if fleet.tokens_total:
        rows.append(_total_row(PLATFORM, fleet, "Token charges", fleet.tokens_total))
    return _csv(rows)


def _item_json(item: LineItem) -> dict[str, Any]:
    return {
        "description": item.description,
        "dimension": item.dimension,
        "quantity": _text(item.quantity),
        "unit": item.unit,
        "unit_price": _text(item.unit_price),
        "amount": _text(item.amount),
    }


def _job_json(job: JobCharge) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "name": job.name,
        "dimension": job.dimension,
        "gpu_seconds": _text(job.gpu_seconds),
        "instance_seconds": _text(job.instance_seconds),
        "quantity": _text(job.quantity),
        "unit": job.unit,
        "unit_price": _text(job.unit_price),
        "amount": _text(job.amount),
    }


def statement_json(statement: Statement) -> dict[str, Any]:
    return {
        "tenant": statement.tenant,
        "period_start": statement.period_start.isoformat(),
        "period_end": statement.period_end.isoformat(),
        "currency": statement.currency,
        "lines": [_item_json(item) for item in statement.lines],
        "total": _text(statement.total),
        "jobs": [_job_json(job) for job in statement.jobs],
    }


def fleet_statement_json(fleet: FleetStatement) -> dict[str, Any]:
    return {
        "period_start": fleet.period_start.isoformat(),
        "period_end": fleet.period_end.isoformat(),
        "currency": fleet.currency,
        "method": fleet.method.value,
        "idle_rule": fleet.idle_rule.value,
        "tenants": [statement_json(statement) for statement in fleet.tenants],
        "capacity": [_item_json(item) for item in fleet.capacity],
        "fleet_cost": _text(fleet.fleet_cost),
        "idle": _text(fleet.idle),
        "tokens_total": _text(fleet.tokens_total),
        "unpriced": list(fleet.unpriced),
    }
