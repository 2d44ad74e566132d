"""The store's tests run on SQLite (a file under tmp_path) and on a real PostgreSQL, each test in a
database of its own (so the URL's user must be allowed to create databases): a migrated one is
emptied and renamed after its test, for the next (postgres_reuse.py), any other is dropped. PostgreSQL is $GPUPLEX_TEST_POSTGRES_URL, else postgres@127.0.0.1:5432/test; where it is
unreachable its tests skip with the reason, unless GPUPLEX_REQUIRE_SERVICES=1, where they fail.
`engine` is a migrated store, copied from one migrated per session (`StoreTemplates`); for a
test that asks for `engine`, the PostgreSQL database is made as that copy in the first place."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from sqlalchemy import Engine, make_url

from gpuplex.ids import random_hex
from gpuplex.store.db import open_store
from tests.integration.store import postgres_reuse
from tests.services import POSTGRES_URL, services_required

BACKENDS = ["sqlite", "postgresql"]


def libpq_dsn(url: str) -> str:
    """`url` (SQLAlchemy's, with its driver) as libpq and psycopg take it."""
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
    dsn = libpq_dsn(POSTGRES_URL)
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True):
            pass
    except psycopg.Error as error:
        lines = str(error).strip().splitlines() or [repr(error)]
        _unavailable(f"PostgreSQL at {where} unreachable: {lines[0]}")
    return dsn


def database_url(name: str) -> str:
    """The store URL of database `name` on the test PostgreSQL."""
    return make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


def _admin(dsn: str, *statements: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as admin:
        for statement in statements:
            admin.execute(statement)  # names made here, never input


class StoreTemplates:
    """Stores migrated once per session (per pytest-xdist worker) and copied into each test's new
    store: running the migrations costs about 0.3 s on SQLite and 1.5 s on PostgreSQL, a copy
    about 0.01 s (the file) and 0.2 s (`CREATE DATABASE ... TEMPLATE`). A copy is the store the
    migrations make, as the migrations seed no rows of their own (tests/integration/store/
    test_migrations.py checks the migrations themselves, on empty stores)."""

    def __init__(self, folder: Path, request: pytest.FixtureRequest) -> None:
        self._folder = folder
        self._request = request
        self._sqlite: Path | None = None
        self._postgres: tuple[str, str] | None = None  # (admin DSN, template's name)
        self._copies: set[str] = set()  # databases made as copies of the template
        self._emptied: list[str] = []  # copies a test used, emptied for the next (postgres_reuse)
        self._fingerprint = ""  # the template's schema (postgres_reuse.fingerprint)

    def fill(self, url: str) -> None:
        """Make the empty store at `url` (from `store_url`) a migrated one: a copy of the SQLite
        template; a PostgreSQL database `store_url` made as a copy already is left as it is."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite":
            target = Path(str(parsed.database))
            if target.exists():
                raise AssertionError(f"{target} is not a new store")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self._sqlite_template(), target)
            return
        name = str(parsed.database)
        if name not in self._copies:
            dsn = self._request.getfixturevalue("postgres_dsn")
            template = self.postgres_template(dsn)
            _admin(
                dsn, f'DROP DATABASE "{name}"', f'CREATE DATABASE "{name}" TEMPLATE "{template}"'
            )

    def lend_postgres_copy(self, dsn: str) -> str:
        """The name of a migrated PostgreSQL database no test has used under that name: one an
        earlier test emptied (postgres_reuse), else a new copy of the template (one CREATE
        DATABASE, where an empty database filled later costs a CREATE, a DROP and a second)."""
        template = self.postgres_template(dsn)
        if self._emptied:
            return self._emptied.pop()
        name = postgres_reuse.new_name()
        _admin(dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self._copies.add(name)
        return name

    def take_back_postgres_copy(self, dsn: str, name: str) -> None:
        """After its test: empty the database and keep it, renamed, for the next test, or drop it
        where it is not as a new copy would be (postgres_reuse)."""
        if postgres_reuse.emptied(libpq_dsn(database_url(name)), self._fingerprint):
            renamed = postgres_reuse.new_name()
            _admin(dsn, f'ALTER DATABASE "{name}" RENAME TO "{renamed}"')
            self._copies.discard(name)
            self._copies.add(renamed)
            self._emptied.append(renamed)
            return
        _admin(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')
        self._copies.discard(name)

    def _sqlite_template(self) -> Path:
        if self._sqlite is None:
            path = self._folder / "template.db"
            open_store(f"sqlite:///{path}").dispose()
            leftovers = [p.name for p in self._folder.iterdir() if p != path]
            assert not leftovers, f"the SQLite template left {leftovers} beside it"
            self._sqlite = path
        return self._sqlite

    def postgres_template(self, dsn: str) -> str:
        """The name of the session's migrated PostgreSQL database the copies are made from."""
        if self._postgres is None:
            name = f"gpuplex_template_{random_hex(12)}"
            _admin(dsn, f'CREATE DATABASE "{name}"')
            open_store(database_url(name)).dispose()  # no connection left: a template must be idle
            template_dsn = libpq_dsn(database_url(name))
            rows = {
                table: n for table, n in postgres_reuse.rows_in_tables(template_dsn).items() if n
            }
            assert not rows, f"the migrations seeded rows {rows}: emptied copies would lack them"
            self._fingerprint = postgres_reuse.fingerprint(template_dsn)
            self._postgres = (dsn, name)
        return self._postgres[1]

    def close(self) -> None:
        if self._postgres is not None:
            dsn, name = self._postgres
            for copy in self._emptied:
                _admin(dsn, f'DROP DATABASE "{copy}" WITH (FORCE)')
            _admin(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def store_templates(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreTemplates]:
    templates = StoreTemplates(tmp_path_factory.mktemp("store-template"), request)
    yield templates
    templates.close()


def _postgres_database_url(dsn: str, templates: StoreTemplates | None) -> Iterator[str]:
    if templates is not None:
        name = templates.lend_postgres_copy(dsn)
        try:
            yield database_url(name)
        finally:
            templates.take_back_postgres_copy(dsn, name)
        return
    name = postgres_reuse.new_name()
    _admin(dsn, f'CREATE DATABASE "{name}"')
    try:
        yield database_url(name)
    finally:
        _admin(dsn, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty store: a new SQLite file, or a new PostgreSQL database. Where the test
    also asks for `engine` (which migrates this store), the PostgreSQL database is made migrated,
    as a copy of the session's template."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'state' / 'gpuplex.db'}"
        return
    dsn = request.getfixturevalue("postgres_dsn")
    migrated = "engine" in request.fixturenames
    templates = request.getfixturevalue("store_templates") if migrated else None
    yield from _postgres_database_url(dsn, templates)


@pytest.fixture
def new_sqlite_store(store_templates: StoreTemplates) -> Callable[[Path], Engine]:
    """Opens a new migrated SQLite store at a path: a copy of the session's template, for tests
    that need one backend only."""

    def open_new(path: Path) -> Engine:
        url = f"sqlite:///{path}"
        store_templates.fill(url)
        return open_store(url)

    return open_new


@pytest.fixture
def engine(store_url: str, store_templates: StoreTemplates) -> Iterator[Engine]:
    """An engine on `store_url`'s store, migrated (a copy of the session's migrated store)."""
    store_templates.fill(store_url)
    opened = open_store(store_url)
    try:
        yield opened
    finally:
        opened.dispose()
