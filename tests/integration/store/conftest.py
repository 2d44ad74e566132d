"""The store's tests run on SQLite (a file under tmp_path) and on a real PostgreSQL, each test in a
schema of its own that is dropped afterwards. PostgreSQL is $GPUPLEX_TEST_POSTGRES_URL, else
postgres@127.0.0.1:5432/test; where it is unreachable its tests skip with the reason, unless
GPUPLEX_REQUIRE_SERVICES=1, where they fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from sqlalchemy import Engine, make_url

from gpuplex.ids import random_hex
from gpuplex.store.db import open_store
from tests.services import POSTGRES_URL, services_required

BACKENDS = ["sqlite", "postgresql"]


def _libpq_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _unavailable(reason: str) -> NoReturn:
    if services_required():
        pytest.fail(f"{reason} (GPUPLEX_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    where = make_url(POSTGRES_URL).render_as_string()
    try:
        import psycopg  # here, not at the top: the SQLite tests run without it
    except ImportError:
        _unavailable(f"psycopg is not installed: cannot test PostgreSQL at {where}")
    dsn = _libpq_dsn(POSTGRES_URL)
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True):
            pass
    except psycopg.Error as error:
        lines = str(error).strip().splitlines() or [repr(error)]
        _unavailable(f"PostgreSQL at {where} unreachable: {lines[0]}")
    return dsn


def _postgres_schema_url(dsn: str) -> Iterator[str]:
    import psycopg

    schema = f"gpuplex_test_{random_hex(12)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        url = make_url(POSTGRES_URL).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty store: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state' / 'gpuplex.db'}"
        return
    yield from _postgres_schema_url(request.getfixturevalue("postgres_dsn"))


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.dispose()
