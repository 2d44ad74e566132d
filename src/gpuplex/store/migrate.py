"""Bring a store's schema to the revision this gpuplex needs, with the alembic migrations in
gpuplex/store/migrations, run from code.

Gateway workers, the usage mover and the server may open the same store at the same moment, so a
migration runs in one transaction under a lock: PostgreSQL's advisory lock, SQLite's write lock
(BEGIN IMMEDIATE). Whoever gets the lock second finds the work done. Opening a store that is
already current costs one small query and does not load alembic.

A store made by issue 4's create_all (its tables, no alembic_version) is stamped at revision 0001,
which is exactly that schema, then upgraded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, func, inspect, select, text

from gpuplex.errors import StoreError
from gpuplex.store.locks import StoreLock

if TYPE_CHECKING:
    from alembic.config import Config

#: The schema revision this code reads and writes (a test checks it is the migrations' head).
HEAD_REVISION = "0014"
#: Issue 4's schema, which its create_all made without recording a revision.
ISSUE4_REVISION = "0001"
ISSUE4_TABLES = frozenset({"api_keys", "usage_records", "audit_log"})
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"


def store_revision(engine: Engine) -> str | None:
    """The store's schema revision; None for a store without one (new, or made by issue 4)."""
    with engine.connect() as connection:
        return _revision(connection)


def upgrade_store(engine: Engine, revision: str = "head") -> None:
    """Migrate the store up to `revision` (default: the newest), under the migration lock."""
    if revision in ("head", HEAD_REVISION) and store_revision(engine) == HEAD_REVISION:
        return
    with engine.connect() as connection, connection.begin():
        _lock(connection)
        current = _revision(connection)
        if current is None and _has_issue4_tables(connection):
            _alembic("stamp", connection, ISSUE4_REVISION)
            current = ISSUE4_REVISION
        _check_known(connection, current)
        _alembic("upgrade", connection, revision)


def downgrade_store(engine: Engine, revision: str) -> None:
    """Migrate the store down to `revision` ("base": no tables at all), under the migration lock.
    Data in the tables and columns removed is lost."""
    with engine.connect() as connection, connection.begin():
        _lock(connection)
        _check_known(connection, _revision(connection))
        _alembic("downgrade", connection, revision)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration for gpuplex's migrations, with no .ini file."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    return config


def _alembic(command_name: str, connection: Connection, revision: str) -> None:
    from alembic import command
    from alembic.util import CommandError

    config = alembic_config(connection)
    try:
        if command_name == "stamp":
            command.stamp(config, revision)
        elif command_name == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)
    except CommandError as error:  # e.g. a revision that does not exist, or the wrong direction
        known = ", ".join(sorted(_known_revisions()))
        raise StoreError(
            f"cannot {command_name} the store to {revision!r}: {error}; revisions: base, {known}"
        ) from None


def _lock(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(int(StoreLock.MIGRATE))))
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def _revision(connection: Connection) -> str | None:
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    found = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return found[0] if len(found) == 1 else None


def _has_issue4_tables(connection: Connection) -> bool:
    present = ISSUE4_TABLES & set(inspect(connection).get_table_names())
    if present and present != ISSUE4_TABLES:
        missing = ", ".join(sorted(ISSUE4_TABLES - present))
        raise StoreError(
            f"store {_shown(connection)} has some of gpuplex's tables but not {missing}, and no schema revision: "
            "it was not made by gpuplex, or only partly; point --store at another database"
        )
    return bool(present)


def _check_known(connection: Connection, current: str | None) -> None:
    if current is None or current in _known_revisions():
        return
    raise StoreError(
        f"store {_shown(connection)} is at schema revision {current}, which this gpuplex does not know (it knows "
        f"up to {HEAD_REVISION}): a newer gpuplex migrated it; upgrade gpuplex"
    )


def _shown(connection: Connection) -> str:
    return connection.engine.url.render_as_string(hide_password=True)


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    scripts = ScriptDirectory.from_config(alembic_config())
    return {script.revision for script in scripts.walk_revisions()}
