"""`gpuplex audit verify | list` on SQLite and PostgreSQL: exit 0 and a one-line verdict on an
intact log, exit 1 naming the first bad entry on a damaged one; `list` filters and shows JSON.
One test runs the real `gpuplex` command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import typer
from sqlalchemy import text
from typer.testing import CliRunner, Result

from gpuplex.cli.audit import audit_app
from gpuplex.core.spec import RateLimits
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.tokens import TokenRepository

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

app = typer.Typer()
app.add_typer(audit_app, name="audit")


def audit(*args: str, store: str) -> Result:
    result = CliRunner().invoke(app, ["audit", *args, "--store", store])
    assert "Traceback" not in result.output
    return result


def some_changes(store_url: str) -> list[int]:
    """Three key changes and two token changes; the entries' ids."""
    engine = open_store(store_url)
    try:
        keys, tokens = KeyRepository(engine), TokenRepository(engine)
        _, key = keys.create("acme", "ci", [], None, RateLimits(), T0, "alice")
        keys.revoke(key.prefix, T0 + timedelta(minutes=1), "alice")
        keys.create("globex", "", [], None, RateLimits(), T0 + timedelta(minutes=2), "bob")
        _, token = tokens.create("ro", "tenant-viewer", "acme", None, T0, "root")
        tokens.revoke(token.prefix, T0 + timedelta(minutes=3), "root")
        with engine.connect() as connection:
            return list(connection.execute(text("SELECT id FROM audit_log ORDER BY id")).scalars())
    finally:
        engine.dispose()


def tamper(store_url: str, statement: str, entry_id: int) -> None:
    engine = open_store(store_url)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement), {"id": entry_id})
    finally:
        engine.dispose()


def test_verify_an_intact_log_exits_0(store_url: str) -> None:
    some_changes(store_url)
    result = audit("verify", store=store_url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "audit log intact: 5 entries, hash chain intact"


def test_verify_an_edited_entry_exits_1_naming_it(store_url: str) -> None:
    ids = some_changes(store_url)
    tamper(store_url, "UPDATE audit_log SET actor = 'mallory' WHERE id = :id", ids[1])
    result = audit("verify", store=store_url)
    assert result.exit_code == 1
    assert f"audit log damaged at entry {ids[1]}: entry {ids[1]} was changed" in result.stdout
    assert "(2 entries checked)" in result.stdout


def test_verify_a_deleted_entry_exits_1_naming_the_entry_after_it(store_url: str) -> None:
    ids = some_changes(store_url)
    tamper(store_url, "DELETE FROM audit_log WHERE id = :id", ids[2])
    result = audit("verify", store=store_url)
    assert result.exit_code == 1
    assert f"damaged at entry {ids[3]}: entry {ids[3]} does not link to entry {ids[1]}" in (
        " ".join(result.stdout.split())
    )


def test_list_filters_by_tenant_and_pages(store_url: str) -> None:
    ids = some_changes(store_url)
    result = audit("list", "--tenant", "acme", "-o", "json", store=store_url)
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [e["action"] for e in listed] == [
        "key.create",
        "key.revoke",
        "token.create",
        "token.revoke",
    ]
    assert {e["tenant"] for e in listed} == {"acme"}
    older = json.loads(
        audit("list", "--limit", "2", "--before", str(ids[2]), "-o", "json", store=store_url).stdout
    )
    assert [e["id"] for e in older] == ids[:2]
    table = audit("list", "--action", "key.revoke", store=store_url)
    assert table.exit_code == 0
    assert "key.revoke" in table.stdout
    assert "key.create" not in table.stdout
    assert (
        "no audit entries for tenant nobody"
        in audit("list", "--tenant", "nobody", store=store_url).stdout
    )


def test_an_unreachable_store_exits_1_with_one_line() -> None:
    result = audit("verify", store="postgresql+psycopg://postgres:hunter2@127.0.0.1:1/test")
    assert result.exit_code == 1
    assert "error: cannot open the store" in result.stderr
    assert "hunter2" not in result.output


def test_the_gpuplex_command_verifies_in_a_subprocess(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'gpuplex.db'}"
    ids = some_changes(store_url)
    command = [sys.executable, "-m", "gpuplex.cli", "audit", "verify", "--store", store_url]
    intact = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    assert (intact.returncode, intact.stderr) == (0, ""), intact
    assert "audit log intact: 5 entries" in intact.stdout
    tamper(store_url, "UPDATE audit_log SET detail = '{}' WHERE id = :id", ids[4])
    damaged = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    assert damaged.returncode == 1, damaged
    assert f"damaged at entry {ids[4]}" in damaged.stdout
