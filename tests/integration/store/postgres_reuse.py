"""Migrated PostgreSQL databases handed from one test to the next, emptied in between, instead of a
`CREATE DATABASE ... TEMPLATE` per test: the copy costs PostgreSQL 0.15-0.4 s of CPU (it writes
every block of about 400 relation files through its buffers and WAL), and the suite ran it for
about 340 tests, close to a tenth of the CPU of a run on 2 cores. Emptying costs a few
milliseconds.

A database is handed on only when it is as a new copy would be:
- no session is left on it (the test's and its subprocesses' are ended first);
- its schema has the template's fingerprint (tables, columns, constraints, indexes, sequences,
  types, triggers, functions, schemas and the schema revision), so a test that migrated down,
  altered or dropped something gets a new copy after it instead;
- every table but alembic_version is emptied and every sequence restarted, which gives a new
  copy's state because the migrations seed no rows (checked on the template);
- it is renamed, so each test still sees a database name no earlier test used, and a process a
  test leaked cannot reach the next test's data by the old name.
Anything unexpected on the way drops the database, as before.
"""

from __future__ import annotations

from gpuplex.ids import random_hex

#: One line per schema object of the public schema, and the schemas beside it; md5 of them all.
FINGERPRINT = r"""
SELECT md5(coalesce(string_agg(item, E'\n' ORDER BY item), '')) FROM (
  SELECT 'column ' || table_name || '.' || column_name || ' ' || ordinal_position::text || ' '
         || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS item
    FROM information_schema.columns WHERE table_schema = 'public'
  UNION ALL SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
  UNION ALL SELECT 'constraint ' || conrelid::regclass::text || ' ' || conname || ' '
         || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace = 'public'::regnamespace
  UNION ALL SELECT 'sequence ' || sequencename || ' ' || start_value::text
    FROM pg_sequences WHERE schemaname = 'public'
  UNION ALL SELECT 'type ' || typname || ' ' || typtype::text
    FROM pg_type WHERE typnamespace = 'public'::regnamespace
  UNION ALL SELECT 'trigger ' || tgrelid::regclass::text || ' ' || tgname
    FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL SELECT 'function ' || oid::regprocedure::text
    FROM pg_proc WHERE pronamespace = 'public'::regnamespace
  UNION ALL SELECT 'schema ' || nspname FROM pg_namespace
    WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
  UNION ALL SELECT 'revision ' || version_num FROM public.alembic_version
) AS objects
"""
TABLES = (
    "SELECT tablename FROM pg_tables "
    "WHERE schemaname = 'public' AND tablename <> 'alembic_version' ORDER BY tablename"
)
SEQUENCES = (
    "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public' ORDER BY sequencename"
)
OTHER_SESSIONS = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
SESSIONS_GONE_WITHIN_S = 10.0


def fingerprint(dsn: str) -> str:
    """The schema fingerprint of the database `dsn` names."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute(FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


def rows_in_tables(dsn: str) -> dict[str, int]:
    """Each table's row count but alembic_version's (a template must have none)."""
    import psycopg
    from psycopg import sql

    counts: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as connection:
        for (table,) in connection.execute(TABLES).fetchall():
            count = sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))
            row = connection.execute(count).fetchone()
            counts[str(table)] = int(row[0]) if row is not None else 0
    return counts


def emptied(dsn: str, expected_fingerprint: str) -> bool:
    """End every other session on the database, then empty it if its schema is the template's:
    True when it is now as a new copy would be, False when it must be dropped instead."""
    import time

    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as connection:
        deadline = time.monotonic() + SESSIONS_GONE_WITHIN_S
        while pids := [pid for (pid,) in connection.execute(OTHER_SESSIONS)]:
            for pid in pids:
                connection.execute("SELECT pg_terminate_backend(%s)", (pid,))
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        try:
            row = connection.execute(FINGERPRINT).fetchone()
        except psycopg.Error:  # e.g. no alembic_version any more: migrated down to base
            return False
        if row is None or row[0] != expected_fingerprint:
            return False
        with connection.transaction():
            connection.execute("SET LOCAL session_replication_role = replica")  # no FK order
            for (table,) in connection.execute(TABLES).fetchall():
                connection.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
            for (sequence,) in connection.execute(SEQUENCES).fetchall():
                restart = sql.SQL("ALTER SEQUENCE {} RESTART").format(sql.Identifier(sequence))
                connection.execute(restart)
    return True


def new_name() -> str:
    return f"gpuplex_test_{random_hex(12)}"
