"""open_store on SQLite and PostgreSQL: the tables, SQLite's settings, reopening, and what a user
sees when the store cannot be reached."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, inspect

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec import RateLimits
from gpuplex.errors import ErrorCode, StoreError
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.tables import metadata
from gpuplex.store.usage import UsageRepository

T0 = datetime(2025, 3, 1, tzinfo=UTC)
UNREACHABLE = "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/test"


def test_every_table_is_created(engine: Engine) -> None:
    assert set(inspect(engine).get_table_names()) >= set(metadata.tables)
    assert {"credentials", "usage_records", "audit_log"} <= set(metadata.tables)


def test_reopening_keeps_what_is_stored(store_url: str) -> None:
    first = open_store(store_url)
    try:
        KeyRepository(first).create("acme", "", [], None, RateLimits(), T0, "tester")
    finally:
        first.dispose()
    second = open_store(store_url)
    try:
        assert [k.tenant for k in KeyRepository(second).list()] == ["acme"]
    finally:
        second.dispose()


def test_sqlite_creates_the_directory_and_runs_in_wal_with_a_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "gpuplex.db"
    engine = open_store(f"sqlite:///{path}")
    try:
        assert path.is_file()
        with engine.connect() as connection:
            pragma = connection.exec_driver_sql
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            assert pragma("PRAGMA busy_timeout").scalar() == 5000
            assert pragma("PRAGMA foreign_keys").scalar() == 1
    finally:
        engine.dispose()


def test_an_unreachable_postgresql_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError) as raised:
        open_store(UNREACHABLE)
    message = raised.value.message
    assert "hunter2" not in message
    assert "postgresql+psycopg://postgres:***@127.0.0.1:1/test" in message
    assert "check that PostgreSQL is running" in message
    assert "\n" not in message
    assert raised.value.code is ErrorCode.STORE_UNAVAILABLE


def test_a_plain_postgresql_url_uses_psycopg() -> None:
    with pytest.raises(StoreError, match=r"postgresql\+psycopg://postgres@127.0.0.1:1/test"):
        open_store("postgresql://postgres@127.0.0.1:1/test")


def test_a_store_that_fails_after_opening_is_a_store_error() -> None:
    engine = create_engine(UNREACHABLE, connect_args={"connect_timeout": 2})
    try:
        with pytest.raises(StoreError, match=r"failed: .*check that the database is up") as raised:
            KeyRepository(engine).list()
        assert "hunter2" not in raised.value.message
    finally:
        engine.dispose()


def test_a_file_that_is_not_sqlite_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "not.db"
    path.write_text("hello, this is not a database\n" * 100)
    with pytest.raises(StoreError, match="file is not a database; check that"):
        open_store(f"sqlite:///{path}")


def test_a_directory_that_cannot_be_made_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create the directory"):
        open_store(f"sqlite:///{blocker / 'sub' / 'gpuplex.db'}")


def test_writers_in_parallel_on_separate_engines_all_succeed(store_url: str) -> None:
    """Like several gateway workers moving usage while an operator creates and revokes keys."""
    engines = [open_store(store_url) for _ in range(4)]
    errors: list[BaseException] = []

    def work(index: int, engine: Engine) -> None:
        try:
            keys, usage = KeyRepository(engine), UsageRepository(engine)
            for n in range(15):
                _, key = keys.create(f"t{index}", "", [], None, RateLimits(), T0, "tester")
                usage.insert_many([_usage(f"{index}-{n}-{m}", key.prefix) for m in range(5)])
                if n % 3 == 0:
                    keys.revoke(key.prefix, T0, "tester")
                keys.version()
        except BaseException as error:  # collected and re-raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, e)) for i, e in enumerate(engines)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        assert UsageRepository(engines[0]).count() == 4 * 15 * 5
        assert len(KeyRepository(engines[0]).list()) == 4 * 15
        assert len(KeyRepository(engines[0]).active_records(T0)) == 4 * 10
    finally:
        for engine in engines:
            engine.dispose()


def _usage(request_id: str, prefix: str) -> UsageRecord:
    return UsageRecord(request_id, "acme", prefix, "chat", "chat.completions", 200, 1, 2, 0.5, T0)
