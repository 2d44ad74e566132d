"""`gpuplex statement [TENANT] --period YYYY-MM [-o table|csv|json]`: a month's chargeback statement
from the running control plane (GET /api/v1/tenants/{tenant}/statements/{period}, or without a
tenant the fleet's, GET /api/v1/statements/{period}).

`table` prints the line items and the total (the fleet's: every tenant's lines, the idle capacity
and the fleet's cost), then the jobs' part of them (each job's GPU-seconds and cost, already in the
total); `csv` and `json` print what the API answers, for scripts. Errors are one line
on stderr with the error model's exit code: a bad period exits 2 before any call, an unknown tenant
exits 2 (`not_found`), a control plane that cannot be reached exits 1
(`control_plane_unreachable`)."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.control_plane_options import ServerOption, TokenOption
from gpuplex.cli.conventions import reported
from gpuplex.client.control_plane import ControlPlane
from gpuplex.clock import utc_now
from gpuplex.consoles import stdout_console
from gpuplex.settings import DEFAULT_SERVER_URL

out = stdout_console()


class StatementFormat(StrEnum):
    TABLE = "table"
    CSV = "csv"
    JSON = "json"


def statement_command(
    tenant: Annotated[
        str | None,
        typer.Argument(
            help="The tenant; without it, the fleet's statement (platform admins).",
            show_default=False,
        ),
    ] = None,
    period: Annotated[
        str | None,
        typer.Option("--period", help="The month, YYYY-MM (UTC).", show_default="this month"),
    ] = None,
    output: Annotated[
        StatementFormat, typer.Option("--output", "-o", help="table, csv or json.")
    ] = StatementFormat.TABLE,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """A month's chargeback statement of one tenant, or of the fleet, from the running instance."""
    from gpuplex.core.meter import month_of, month_window

    with reported():
        month = period or month_of(utc_now())
        month_window(month)  # a bad period is refused here, before any call
        api = ControlPlane.of(server, token)
        path = f"/tenants/{tenant}/statements/{month}" if tenant else f"/statements/{month}"
        if output is StatementFormat.CSV:
            sys.stdout.write(api.get_text(path, format="csv"))
            return
        body = api.get_json(path)
    if output is StatementFormat.JSON:
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    elif tenant:
        out.print(tenant_table(body, month))
        _print_jobs([body], month, with_tenant=False)
    else:
        out.print(fleet_table(body, month))
        _print_jobs(body["tenants"], month, with_tenant=True)


def _print_jobs(statements: list[dict[str, Any]], month: str, *, with_tenant: bool) -> None:
    if any(statement.get("jobs") for statement in statements):
        out.print(jobs_table(statements, month, with_tenant=with_tenant))


def jobs_table(statements: list[dict[str, Any]], month: str, *, with_tenant: bool) -> Table:
    """Each job's GPU-seconds and cost per dimension: part of the lines above, not added to
    them."""
    table = Table(title=f"Jobs · {month} · in the lines above", title_justify="left")
    if with_tenant:
        table.add_column("tenant")
    for name in ("job", "name", "dimension"):
        table.add_column(name)
    table.add_column("GPU-seconds", justify="right")
    table.add_column("amount", justify="right")
    for statement in statements:
        for job in statement.get("jobs", []):
            cells = (
                escape(job["job_id"]),
                escape(job["name"] or ""),
                escape(job["dimension"]),
                escape(job["gpu_seconds"]),
                escape(job["amount"]),
            )
            table.add_row(*((escape(statement["tenant"]),) if with_tenant else ()), *cells)
    return table


def tenant_table(body: dict[str, Any], month: str) -> Table:
    """One tenant's line items and its total."""
    table = _table(f"{body['tenant']} · {month} · {body['currency']}", with_tenant=False)
    for item in body["lines"]:
        table.add_row(*_item_cells(item))
    table.add_section()
    table.add_row("[bold]Total[/]", "", "", "", "", f"[bold]{escape(body['total'])}[/]")
    return table


def fleet_table(body: dict[str, Any], month: str) -> Table:
    """Every tenant's line items and total, then the idle capacity and the fleet's cost."""
    title = (
        f"Fleet · {month} · {body['currency']} · method {body['method']}, "
        f"idle rule {body['idle_rule']}"
    )
    table = _table(title, with_tenant=True)
    for statement in body["tenants"]:
        name = escape(statement["tenant"])
        for item in statement["lines"]:
            table.add_row(name, *_item_cells(item))
        table.add_row(
            name, "[bold]Total[/]", "", "", "", "", f"[bold]{escape(statement['total'])}[/]"
        )
        table.add_section()
    table.add_row("(platform)", "Idle capacity", "", "", "", "", escape(body["idle"]))
    for item in body["capacity"]:
        table.add_row("(platform)", *_item_cells(item))
    table.add_row(
        "(platform)",
        "[bold]Fleet cost[/]",
        "",
        "",
        "",
        "",
        f"[bold]{escape(body['fleet_cost'])}[/]",
    )
    if body["tokens_total"] not in ("0", "0.00"):
        table.add_row("(platform)", "Token charges", "", "", "", "", escape(body["tokens_total"]))
    return table


def _table(title: str, *, with_tenant: bool) -> Table:
    table = Table(title=escape(title), title_justify="left")
    if with_tenant:
        table.add_column("tenant")
    table.add_column("description")
    table.add_column("dimension")
    table.add_column("quantity", justify="right")
    table.add_column("unit")
    table.add_column("unit price", justify="right")
    table.add_column("amount", justify="right")
    return table


def _item_cells(item: dict[str, Any]) -> tuple[str, ...]:
    return (
        escape(item["description"]),
        escape(item["dimension"]),
        escape(item["quantity"]),
        escape(item["unit"]),
        escape(item["unit_price"]),
        escape(item["amount"]),
    )
