"""The schema's migrations on SQLite and PostgreSQL: up, down to nothing and up again; the result
equals the ORM tables; issue 4's create_all stores are stamped and upgraded with their audit log
chained; many processes may open a new store at once; a store from a newer gpuplex is refused."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, MetaData, create_engine, inspect, make_url, text

from gpuplex.core.spec import RateLimits
from gpuplex.errors import StoreError
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.migrate import (
    HEAD_REVISION,
    ISSUE4_REVISION,
    alembic_config,
    downgrade_store,
    store_revision,
    upgrade_store,
)
from gpuplex.store.tables import metadata
from tests.integration.store.issue4_schema import issue4_metadata

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
OPENERS = 6


def schema_diff(engine: Engine, target: MetaData) -> list[Any]:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, target))


def bare_engine(store_url: str) -> Engine:
    """An engine on the store that migrates nothing (as issue 4's gpuplex, which had create_all)."""
    url = make_url(store_url)
    if url.get_backend_name() == "sqlite" and url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    return create_engine(url)


def test_head_revision_is_the_newest_migration() -> None:
    scripts = ScriptDirectory.from_config(alembic_config())
    assert scripts.get_heads() == [HEAD_REVISION]
    assert [s.revision for s in scripts.walk_revisions()] == [
        "0014",
        "0013",
        "0012",
        "0011",
        "0010",
        "0009",
        "0008",
        "0007",
        "0006",
        "0005",
        "0004",
        "0003",
        "0002",
        "0001",
    ]


def test_a_new_store_is_migrated_to_head_and_equals_the_orm_tables(engine: Engine) -> None:
    assert store_revision(engine) == HEAD_REVISION
    assert set(inspect(engine).get_table_names()) == set(metadata.tables) | {"alembic_version"}
    assert schema_diff(engine, metadata) == []


def test_upgrade_downgrade_to_base_and_upgrade_again(engine: Engine) -> None:
    KeyRepository(engine).create("acme", "", [], None, RateLimits(), T0, "tester")
    downgrade_store(engine, ISSUE4_REVISION)
    assert store_revision(engine) == ISSUE4_REVISION
    assert schema_diff(engine, issue4_metadata) == []
    with engine.connect() as connection:
        assert connection.execute(text("SELECT tenant FROM api_keys")).scalars().all() == ["acme"]
    downgrade_store(engine, "base")
    assert store_revision(engine) is None
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade_store(engine)
    assert store_revision(engine) == HEAD_REVISION
    assert schema_diff(engine, metadata) == []
    KeyRepository(engine).create("acme", "", [], None, RateLimits(), T0, "tester")
    assert verify_audit(engine).ok


def test_revision_0001_is_exactly_issue_4s_schema(engine: Engine) -> None:
    downgrade_store(engine, "base")
    upgrade_store(engine, ISSUE4_REVISION)
    assert store_revision(engine) == ISSUE4_REVISION
    assert schema_diff(engine, issue4_metadata) == []


def test_an_issue_4_store_is_stamped_upgraded_and_its_audit_log_chained(store_url: str) -> None:
    old = bare_engine(store_url)
    try:
        issue4_metadata.create_all(old)
        with old.begin() as connection:
            for n, (action, detail) in enumerate(
                [
                    ("key.create", '{"tenant": "acme", "name": "ci"}'),
                    ("key.revoke", '{"tenant": "acme", "name": "ci"}'),
                    ("other.thing", '{"tenant": "not-a-key"}'),
                ]
            ):
                connection.execute(
                    text(
                        "INSERT INTO audit_log (at, actor, action, target, detail) "
                        "VALUES (:at, 'alice', :action, :target, :detail)"
                    ),
                    {
                        "at": T0.replace(minute=n),
                        "action": action,
                        "target": f"x:{n}",
                        "detail": detail,
                    },
                )
        assert store_revision(old) is None
    finally:
        old.dispose()
    engine = open_store(store_url)
    try:
        assert store_revision(engine) == HEAD_REVISION
        assert schema_diff(engine, metadata) == []
        verdict = verify_audit(engine)
        assert (verdict.ok, verdict.entries_checked) == (True, 3), verdict
        entries = AuditLog(engine).entries()
        assert [e.tenant for e in entries] == ["acme", "acme", None]
        assert entries[0].at == T0
        KeyRepository(engine).create("acme", "", [], None, RateLimits(), T0, "tester")
        assert verify_audit(engine).entries_checked == 4
        assert verify_audit(engine).ok
    finally:
        engine.dispose()


def test_a_store_with_only_some_of_issue_4s_tables_is_refused(store_url: str) -> None:
    old = bare_engine(store_url)
    try:
        issue4_metadata.tables["api_keys"].create(old)
    finally:
        old.dispose()
    with pytest.raises(StoreError, match="not audit_log, usage_records, and no schema revision"):
        open_store(store_url)


def test_a_store_from_a_newer_gpuplex_is_refused(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(
        StoreError, match="revision 0099, which this gpuplex does not know"
    ) as raised:
        open_store(str(engine.url.render_as_string(hide_password=False)))
    assert "upgrade gpuplex" in raised.value.message


@pytest.mark.parametrize("issue4", [False, True], ids=["new", "issue4"])
def test_many_processes_open_a_store_at_once(store_url: str, issue4: bool) -> None:
    """Gateway workers, the usage mover and the server starting together on one store."""
    if issue4:
        old = bare_engine(store_url)
        try:
            issue4_metadata.create_all(old)
        finally:
            old.dispose()
    probe = (
        "import sys\n"
        "from gpuplex.store.db import open_store\n"
        "from gpuplex.core.spec import RateLimits\n"
        "from gpuplex.store.keys import KeyRepository\n"
        "from gpuplex.clock import utc_now\n"
        "engine = open_store(sys.argv[1])\n"
        "KeyRepository(engine).create('acme', '', [], None, RateLimits(), utc_now(), 'probe')\n"
        "engine.dispose()\n"
    )
    openers = [
        subprocess.Popen(  # noqa: S603 - this interpreter, a script written above
            [sys.executable, "-W", "error", "-c", probe, store_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(OPENERS)
    ]
    outputs = [opener.communicate(timeout=60)[0] for opener in openers]
    assert [opener.returncode for opener in openers] == [0] * OPENERS, outputs
    engine = open_store(store_url)
    try:
        assert store_revision(engine) == HEAD_REVISION
        assert len(KeyRepository(engine).list()) == OPENERS
        verdict = verify_audit(engine)
        assert (verdict.ok, verdict.entries_checked) == (True, OPENERS), verdict
    finally:
        engine.dispose()


ROUNDS = 50


def _open_and_write(url: str, start: Any, errors: Any) -> None:
    """One process of a round: wait for the others, then open the store and write to it."""
    start.wait()
    try:
        engine = open_store(url)
        KeyRepository(engine).create("acme", "", [], None, RateLimits(), T0, "probe")
        engine.dispose()
    except Exception as error:  # the round's assertion shows it
        errors.put(f"{type(error).__name__}: {error}")
        raise SystemExit(1) from None


def test_fifty_rounds_of_processes_opening_an_older_sqlite_store_at_once(tmp_path: Path) -> None:
    """The race a fresh-clone CI run once lost (1 of 6 openers of an issue-4 store refused, "not
    SQLite" when it was busy): forked processes, all released at one barrier, open one SQLite
    store that needs migrating and write to it; 50 rounds in a row. (A new store: the subprocess
    test above.)"""
    forks = multiprocessing.get_context("fork")
    for round_number in range(ROUNDS):
        url = f"sqlite:///{tmp_path / f'round-{round_number}.db'}"
        old = bare_engine(url)
        try:
            issue4_metadata.create_all(old)
        finally:
            old.dispose()
        start, errors = forks.Barrier(OPENERS), forks.Queue()
        openers = [
            forks.Process(target=_open_and_write, args=(url, start, errors)) for _ in range(OPENERS)
        ]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
        failures = [errors.get(timeout=1) for _ in range(errors.qsize())]
        assert [opener.exitcode for opener in openers] == [0] * OPENERS, (round_number, failures)
        engine = open_store(url)
        try:
            assert len(KeyRepository(engine).list()) == OPENERS
        finally:
            engine.dispose()
