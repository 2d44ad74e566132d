"""Serialising writers that must read-then-write: the audit chain's tail, the current spec revision,
the room left for dashboard sign-ins.

PostgreSQL: a transaction-level advisory lock, one number per job, released at commit or rollback.
SQLite: the database's one write lock, taken up front with BEGIN IMMEDIATE (or already held when the
transaction has written), so a read after it sees the last committed state and nobody else writes
until this transaction ends.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session


class StoreLock(IntEnum):
    """PostgreSQL advisory lock numbers, one per job (arbitrary, but fixed forever)."""

    MIGRATE = 0x67_70_78_01
    AUDIT = 0x67_70_78_02
    SPEC = 0x67_70_78_03
    JOB_RUNNER = 0x67_70_78_04  # session-level: held by the one job runner (store/leader.py)
    SIGN_INS = 0x67_70_78_05  # counting the dashboard's sign-ins under way, then adding one


def write_lock(session: Session, lock: StoreLock) -> None:
    """Hold `lock` (PostgreSQL) or the database's write lock (SQLite) until the transaction ends."""
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_advisory_xact_lock(int(lock))))
        return
    if connection.dialect.name == "sqlite":
        raw: Any = connection.connection.dbapi_connection
        if not raw.in_transaction:  # nothing written yet: take the write lock now
            connection.exec_driver_sql("BEGIN IMMEDIATE")
