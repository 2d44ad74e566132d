"""A migrated PostgreSQL database handed to the next test (postgres_reuse.py) is as a new copy of
the template would be: a name no test used, every table empty, every sequence restarted, the same
schema; one whose schema a test changed is dropped instead; and a session a test left open is
ended and cannot follow the data to the next test."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest
from sqlalchemy import create_engine, text

from gpuplex.core.spec import RateLimits
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.migrate import downgrade_store
from tests.integration.store import postgres_reuse
from tests.integration.store.conftest import StoreTemplates, database_url, libpq_dsn

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _exists(dsn: str, name: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as admin:
        found = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return found is not None


def _used(name: str) -> None:
    """What a test does to its store: rows in several tables, sequences moved on."""
    engine = open_store(database_url(name))
    try:
        keys = KeyRepository(engine)
        for n in range(3):
            keys.create("acme", f"key {n}", [], None, RateLimits(), T0, "probe")
    finally:
        engine.dispose()


def test_the_next_test_gets_an_empty_copy_under_a_new_name(
    postgres_dsn: str, store_templates: StoreTemplates
) -> None:
    first = store_templates.lend_postgres_copy(postgres_dsn)
    _used(first)
    database = libpq_dsn(database_url(first))
    assert any(postgres_reuse.rows_in_tables(database).values())
    store_templates.take_back_postgres_copy(postgres_dsn, first)

    second = store_templates.lend_postgres_copy(postgres_dsn)
    try:
        assert second != first
        assert not _exists(postgres_dsn, first)
        database = libpq_dsn(database_url(second))
        assert postgres_reuse.rows_in_tables(database)  # the tables are there ...
        assert not any(postgres_reuse.rows_in_tables(database).values())  # ... and empty
        with psycopg.connect(database, autocommit=True) as connection:
            moved = connection.execute(
                "SELECT sequencename FROM pg_sequences "
                "WHERE schemaname = 'public' AND last_value IS NOT NULL"
            ).fetchall()
        assert moved == []  # every sequence starts over, as on a new copy
        template = store_templates.postgres_template(postgres_dsn)
        assert postgres_reuse.fingerprint(database) == postgres_reuse.fingerprint(
            libpq_dsn(database_url(template))
        )
    finally:
        store_templates.take_back_postgres_copy(postgres_dsn, second)


@pytest.mark.parametrize("change", ["migrated down", "a column added"])
def test_a_copy_whose_schema_a_test_changed_is_dropped_not_handed_on(
    postgres_dsn: str, store_templates: StoreTemplates, change: str
) -> None:
    name = store_templates.lend_postgres_copy(postgres_dsn)
    engine = open_store(database_url(name))
    try:
        if change == "migrated down":
            downgrade_store(engine, "0013")
        else:
            with engine.begin() as connection:
                connection.execute(text("ALTER TABLE audit_log ADD COLUMN extra integer"))
    finally:
        engine.dispose()
    store_templates.take_back_postgres_copy(postgres_dsn, name)
    assert not _exists(postgres_dsn, name)
    handed = store_templates.lend_postgres_copy(postgres_dsn)
    try:
        database = libpq_dsn(database_url(handed))
        template = store_templates.postgres_template(postgres_dsn)
        assert postgres_reuse.fingerprint(database) == postgres_reuse.fingerprint(
            libpq_dsn(database_url(template))
        )
    finally:
        store_templates.take_back_postgres_copy(postgres_dsn, handed)


def test_a_session_left_open_is_ended_and_cannot_reach_the_next_test(
    postgres_dsn: str, store_templates: StoreTemplates
) -> None:
    name = store_templates.lend_postgres_copy(postgres_dsn)
    leaked = create_engine(database_url(name))  # a test that forgot to dispose its engine
    with leaked.connect() as connection:
        connection.execute(text("SELECT 1"))
    held = leaked.connect()  # and one still checked out
    try:
        store_templates.take_back_postgres_copy(postgres_dsn, name)
        with pytest.raises(Exception, match=r"terminat|closed|does not exist"):
            held.execute(text("SELECT 1"))
        with pytest.raises(Exception, match="does not exist"), leaked.connect() as again:
            again.execute(text("SELECT 1"))
    finally:
        held.invalidate()
        leaked.dispose()
