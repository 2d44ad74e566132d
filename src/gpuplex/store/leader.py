"""One leader per store for work only one process may do at a time (the job runner): two control
planes on one store, or a second one started by mistake, must not both place jobs on the same free
GPU.

PostgreSQL: a session-level advisory lock on a connection the leader keeps open, keyed by the lock
and the store's schema (two stores in one database do not hold each other up); it goes with the
connection, so a leader killed with -9 lets go as soon as the server notices the connection is
gone. SQLite: an exclusive `flock` on a file beside the database, which the kernel releases when the
process dies. An in-memory SQLite store belongs to one process: that process leads.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Protocol

from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import SQLAlchemyError

from gpuplex.store.locks import StoreLock


class Leadership(Protocol):
    def held(self) -> bool:
        """Is the lock still this process's? (False once its connection is lost.)"""
        ...

    def release(self) -> None: ...


def try_lead(engine: Engine, lock: StoreLock) -> Leadership | None:
    """Take the lead for `lock` if nobody holds it; None when another process does."""
    backend = engine.dialect.name
    if backend == "postgresql":
        return _PostgresLead.take(engine, lock)
    database = engine.url.database
    if backend == "sqlite" and database and database != ":memory:":
        return _FileLead.take(Path(f"{database}.{lock.name.lower()}.lock"))
    return _OnlyProcess()


class _PostgresLead:
    def __init__(self, connection: Connection, lock: StoreLock) -> None:
        self._connection = connection
        self._lock = lock

    @classmethod
    def take(cls, engine: Engine, lock: StoreLock) -> _PostgresLead | None:
        connection = engine.connect()
        try:
            schema_key = func.hashtext(func.current_schema())
            got = connection.execute(
                select(func.pg_try_advisory_lock(int(lock), schema_key))
            ).scalar()
            connection.commit()  # the lock is the session's: it outlives this transaction
        except SQLAlchemyError:
            connection.close()
            raise
        if not got:
            connection.close()
            return None
        return cls(connection, lock)

    def held(self) -> bool:
        try:
            self._connection.execute(select(1))
            self._connection.commit()
        except SQLAlchemyError:
            return False
        return True

    def release(self) -> None:
        """Unlock, then close the connection for good (not back to the pool). Closing alone
        ends the lock only once the server's backend has exited, a moment later: a control
        plane taking over at once would find it still held."""
        try:
            schema_key = func.hashtext(func.current_schema())
            self._connection.execute(select(func.pg_advisory_unlock(int(self._lock), schema_key)))
            self._connection.commit()
        except SQLAlchemyError:
            pass  # the connection is gone: so is its lock, once the server notices
        try:
            self._connection.invalidate()
            self._connection.close()
        except SQLAlchemyError:
            return


class _FileLead:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def take(cls, path: Path) -> _FileLead | None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return cls(fd)

    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class _OnlyProcess:
    def held(self) -> bool:
        return True

    def release(self) -> None:
        return
