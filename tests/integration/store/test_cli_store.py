"""`gpuplex store current | upgrade | downgrade` on SQLite and PostgreSQL: a store walked down to
an older revision and back up again by hand, with data surviving where its table does; a
downgrade without --yes, or to a revision that does not exist, changes nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import typer
from typer.testing import CliRunner, Result

from gpuplex.cli.store import store_app
from gpuplex.core.spec import RateLimits
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.migrate import HEAD_REVISION, store_revision

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
app = typer.Typer()
app.add_typer(store_app, name="store")


def store_cli(*args: str, store: str) -> Result:
    result = CliRunner().invoke(app, ["store", *args, "--store", store])
    assert "Traceback" not in result.output
    return result


def revision_of(store_url: str) -> str | None:
    engine = open_store(store_url, migrate=False)
    try:
        return store_revision(engine)
    finally:
        engine.dispose()


def test_down_to_the_first_revision_and_up_again_keeps_the_keys(store_url: str) -> None:
    engine = open_store(store_url)
    try:
        KeyRepository(engine).create("acme", "ci", [], None, RateLimits(), T0, "alice")
    finally:
        engine.dispose()

    assert f"revision {HEAD_REVISION} (up to date)" in store_cli("current", store=store_url).output
    down = store_cli("downgrade", "0001", "--yes", store=store_url)
    assert down.exit_code == 0, down.output
    assert revision_of(store_url) == "0001"
    assert "newest: " in store_cli("current", store=store_url).output
    up = store_cli("upgrade", store=store_url)
    assert up.exit_code == 0, up.output
    assert revision_of(store_url) == HEAD_REVISION

    engine = open_store(store_url)
    try:
        assert [k.name for k in KeyRepository(engine).list("acme")] == ["ci"]
    finally:
        engine.dispose()


def test_a_downgrade_needs_yes_and_a_real_revision(store_url: str) -> None:
    open_store(store_url).dispose()

    unconfirmed = store_cli("downgrade", "base", store=store_url)
    unknown = store_cli("downgrade", "0099", "--yes", store=store_url)

    assert unconfirmed.exit_code == 2
    assert "--yes" in unconfirmed.output
    assert unknown.exit_code == 1
    assert "cannot downgrade the store to '0099'" in unknown.output
    assert revision_of(store_url) == HEAD_REVISION
