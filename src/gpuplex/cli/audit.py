"""`gpuplex audit verify | list`: the store's hash-chained audit log.

`verify` walks the whole chain and exits 0 when it is intact, 1 when it is not, naming the first
entry that was edited or that follows a deleted one. `list` shows the newest entries.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import StoreOption, opened_store, reported
from gpuplex.cli.help_pages import command_group
from gpuplex.consoles import stdout_console
from gpuplex.core.plural import counted

if TYPE_CHECKING:
    from gpuplex.store.audit import AuditEntry

audit_app = command_group("The audit log: verify its hash chain, list its entries.")
out = stdout_console()
EXIT_DAMAGED = 1


class AuditOutput(StrEnum):
    TABLE = "table"
    JSON = "json"


@audit_app.command("verify")
def verify_command(store: StoreOption = None) -> None:
    """Check that no entry was changed, removed or moved: exit 0 when intact, 1 when not."""
    with reported(), opened_store(store, must_exist=True) as engine:
        from gpuplex.store.audit import verify_audit

        verdict = verify_audit(engine)
    if verdict.ok:
        out.print(f"[green]audit log intact[/]: {escape(verdict.reason)}", highlight=False)
        return
    out.print(
        f"[red]audit log damaged[/] at entry {verdict.first_bad_id}: {escape(verdict.reason)} "
        f"({counted(verdict.entries_checked, 'entry', 'entries')} checked)",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(EXIT_DAMAGED)


@audit_app.command("list")
def list_command(
    tenant: Annotated[str | None, typer.Option(help="Only entries about this tenant.")] = None,
    action: Annotated[
        str | None, typer.Option(help="Only this action, e.g. key.create or spec.apply.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="How many entries.")] = 50,
    before: Annotated[
        int | None, typer.Option(min=1, help="Only entries older than this id (to page back).")
    ] = None,
    store: StoreOption = None,
    output: Annotated[AuditOutput, typer.Option("--output", "-o")] = AuditOutput.TABLE,
) -> None:
    """The newest entries, oldest first (times in UTC)."""
    with reported(), opened_store(store, must_exist=True) as engine:
        from gpuplex.store.audit import AuditLog

        entries = AuditLog(engine).entries(action, limit, tenant=tenant, before_id=before)
    if output is AuditOutput.JSON:
        sys.stdout.write(json.dumps([entry_json(e) for e in entries], indent=2) + "\n")
        return
    if not entries:
        out.print("no audit entries" + (f" for tenant {escape(tenant)}" if tenant else ""))
        return
    out.print(entries_table(entries))


def entry_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "at": entry.at.isoformat(),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "tenant": entry.tenant,
        "detail": entry.detail,
        "before": entry.before,
        "after": entry.after,
        "entry_hash": entry.entry_hash,
    }


def entries_table(entries: list[AuditEntry]) -> Table:
    table = Table(title="Audit log (times in UTC)", title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("id", "at", "actor", "action", "target"):
        table.add_column(column, no_wrap=column in ("id", "at", "action"), overflow="fold")
    table.add_column("change", overflow="fold")
    for entry in entries:
        target = escape(entry.target)
        if entry.tenant is not None:
            target += f"\n[dim]tenant {escape(entry.tenant)}[/]"
        table.add_row(
            str(entry.id),
            entry.at.strftime("%Y-%m-%d %H:%M"),
            escape(entry.actor),
            escape(entry.action),
            target,
            escape(_change(entry)),
        )
    return table


def _change(entry: AuditEntry) -> str:
    """What changed, briefly: the fields that differ, or what was set; nulls left out."""
    before, after = entry.before, entry.after
    if isinstance(before, dict) and isinstance(after, dict):
        changed = [k for k in sorted(after.keys() | before.keys()) if before.get(k) != after.get(k)]
        return (
            "; ".join(
                f"{k}: {_compact(before.get(k))} -> {_compact(after.get(k))}" for k in changed
            )
            or "no change"
        )
    if isinstance(after, dict):
        return "set " + _fields(after)
    if before is not None:
        return "removed " + _fields(before) if isinstance(before, dict) else "removed"
    return _fields(entry.detail) or "-"


def _fields(values: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={_compact(v)}" for k, v in sorted(values.items()) if v not in (None, "", [])
    )


def _compact(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
