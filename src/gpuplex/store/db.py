"""Open the store: SQLite (the embedded default) or PostgreSQL, by URL, its schema migrated to the
revision this code needs (see migrate.py).

SQLite runs in WAL mode (readers never wait for the writer) with a 5 s busy timeout and foreign
keys on. Its driver starts a transaction at the first write, so every write transaction here
begins with its write: the lock is then taken (or waited for) up front, never upgraded mid-way.

Every failure to open or use the store is a StoreError naming the URL, without its password, and
what to check.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, create_engine, event, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
)

from gpuplex.clock import monotonic_s, sleep_s
from gpuplex.errors import StoreError, StoreValueRefused
from gpuplex.store.migrate import upgrade_store

SQLITE_BUSY_TIMEOUT_MS = 5000
#: How long opening a SQLite store retries while other processes hold locks SQLite does not wait
#: for (a lock upgrade that could deadlock is refused at once, busy_timeout or not).
SQLITE_OPEN_RETRY_S = 30.0
POSTGRES_CONNECT_TIMEOUT_S = 5
_CHECK = "check --store or GPUPLEX_STORE_URL"


def open_store(url: str, *, migrate: bool = True) -> Engine:
    """An engine for the store at `url`, its schema upgraded to the newest revision (under a lock,
    so several processes may open a store at once), unless `migrate` is False (for
    `gpuplex store`, which migrates as it is told). Raises StoreError."""
    parsed = _parse(url)
    shown = safe_url(parsed)
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            engine = _sqlite_engine(parsed)
        elif backend == "postgresql":
            engine = _postgres_engine(parsed)
        else:
            raise StoreError(
                f"store {shown}: {backend!r} is not supported; use sqlite:///PATH or "
                f"postgresql+psycopg://USER@HOST:PORT/DATABASE ({_CHECK})"
            )
    except (NoSuchModuleError, ImportError, ArgumentError, TypeError) as error:
        raise StoreError(f"store {shown}: cannot load its driver ({error}); {_CHECK}") from None
    if not migrate:
        return engine
    deadline = monotonic_s() + SQLITE_OPEN_RETRY_S
    while True:
        try:
            upgrade_store(engine)
        except OperationalError as error:
            if backend != "sqlite" or not _busy(error):
                engine.dispose()
                raise StoreError(_open_failure(shown, backend, error)) from None
            # Another process opening the same file at this moment (gateway workers, the usage
            # mover and the server all start together) holds a lock SQLite will not wait for.
            if monotonic_s() >= deadline:
                engine.dispose()
                raise StoreError(
                    f"cannot open the store {shown}: it stayed busy for {SQLITE_OPEN_RETRY_S:g} s "
                    f"({_first_line(error)}): another process holds its write lock; "
                    "retry once it has finished"
                ) from None
            sleep_s(random.uniform(0.01, 0.1))  # noqa: S311 - jitter, not a secret
            continue
        except SQLAlchemyError as error:
            engine.dispose()
            raise StoreError(_open_failure(shown, backend, error)) from None
        except StoreError:
            engine.dispose()
            raise
        return engine


def _busy(error: OperationalError) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED: the file is fine, another connection holds a lock."""
    text = str(getattr(error, "orig", error)).lower()
    return "database is locked" in text or "database table is locked" in text or "busy" in text


def sqlite_file(url: str) -> Path | None:
    """The file a `sqlite:///PATH` URL names; None for another store, an in-memory or URI
    database, or a URL that does not parse (open_store says what is wrong with it)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    return None if database.startswith("file:") else Path(database)


def safe_url(url: URL | str) -> str:
    """The URL as it may be shown: the password, if any, is replaced by ***."""
    parsed = url if isinstance(url, URL) else make_url(url)
    return parsed.render_as_string(hide_password=True)


@contextmanager
def store_errors(engine: Engine) -> Iterator[None]:
    """Turn a database failure inside the block into a StoreError naming the store."""
    try:
        yield
    except DataError as error:
        raise StoreValueRefused(
            f"the store refused a value: {_first_line(error)}; remove NUL characters and "
            "keep text and numbers within their limits"
        ) from None
    except DBAPIError as error:
        raise StoreError(
            f"store {safe_url(engine.url)} failed: {_first_line(error)}; "
            "check that the database is up and reachable"
        ) from None


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise StoreError(
            f"store URL {url.split('@')[-1]!r} is not a URL: write sqlite:///PATH or "
            f"postgresql+psycopg://USER@HOST:PORT/DATABASE ({_CHECK})"
        ) from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # the driver gpuplex installs
    return parsed


def _sqlite_engine(url: URL) -> Engine:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        path = Path(database)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(
                f"store {safe_url(url)}: cannot create the directory {path.parent}: "
                f"{error.strerror}; choose a writable place ({_CHECK})"
            ) from None
    engine = create_engine(url)
    event.listen(engine, "connect", _sqlite_on_connect)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: object) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = POSTGRES_CONNECT_TIMEOUT_S
    return create_engine(url, connect_args=connect_args, pool_pre_ping=True)


def _open_failure(shown: str, backend: str, error: SQLAlchemyError) -> str:
    reason = _first_line(error)
    if backend == "sqlite":
        hint = "check that the file's directory exists and is writable, and the file is SQLite"
    else:
        hint = (
            "check that PostgreSQL is running and reachable at that host and port, "
            "and the user, password and database"
        )
    return f"cannot open the store {shown}: {reason}; {hint} ({_CHECK})"


def _first_line(error: SQLAlchemyError) -> str:
    original = getattr(error, "orig", None)
    text = str(original if original is not None else error).strip()
    return text.splitlines()[0] if text else type(error).__name__
