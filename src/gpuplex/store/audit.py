"""The audit log: an append-only, hash-chained list of who did what to which thing, written in the
same transaction as the change it records. Never holds a secret.

Appends are serialised (PostgreSQL: an advisory lock; SQLite: its write lock), so each entry links
to the one committed before it; `verify_audit` walks the chain (see audit_chain.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.store.audit_chain import (
    GENESIS_HASH,
    AuditVerdict,
    ChainedFields,
    as_stored,
    check_chain,
    entry_hash,
)
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import AuditRow

__all__ = ["AuditEntry", "AuditLog", "AuditVerdict", "append_audit", "verify_audit"]

VERIFY_BATCH_ROWS = 1000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime  # timezone-aware UTC
    actor: str
    action: str  # e.g. key.create, key.revoke, spec.apply
    target: str  # e.g. key:1a2b3c4d
    detail: dict[str, Any]
    tenant: str | None = None  # the tenant the change concerns; None: fleet-wide
    before: Any = None  # the changed thing's state before, when it had one
    after: Any = None  # and after, when it still has one
    prev_hash: str = GENESIS_HASH
    entry_hash: str = ""


def append_audit(
    session: Session,
    *,
    at: datetime,
    actor: str,
    action: str,
    target: str,
    tenant: str | None = None,
    detail: dict[str, Any] | None = None,
    before: Any = None,
    after: Any = None,
) -> AuditEntry:
    """Add one entry to the caller's transaction: it commits or rolls back with the change. Holds
    the audit lock until then, so write the change first and commit soon after."""
    write_lock(session, StoreLock.AUDIT)
    row = AuditRow(
        at=at.astimezone(UTC) if at.tzinfo is not None else at,  # naive: refused at the flush
        actor=actor,
        action=action,
        target=target,
        tenant=tenant,
        detail=as_stored(detail or {}),
        before=as_stored(before),
        after=as_stored(after),
        prev_hash=GENESIS_HASH,
        entry_hash="",
    )
    session.add(row)
    session.flush()  # the id, which the hash covers
    last = session.scalars(
        select(AuditRow.entry_hash).where(AuditRow.id < row.id).order_by(AuditRow.id.desc())
    ).first()
    row.prev_hash = last if last is not None else GENESIS_HASH
    row.entry_hash = entry_hash(_fields(row))
    session.flush()
    return _entry(row)


def verify_audit(engine: Engine) -> AuditVerdict:
    """Walk the whole chain, oldest first; the verdict names the first entry that is not intact."""
    query = select(AuditRow).order_by(AuditRow.id).execution_options(yield_per=VERIFY_BATCH_ROWS)
    with store_errors(engine), Session(engine) as session:
        rows = session.scalars(query)
        try:
            return check_chain((_fields(row), row.entry_hash) for row in rows)
        finally:
            rows.close()  # the walk may stop early: release PostgreSQL's server-side cursor


class AuditLog:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def entries(
        self,
        action: str | None = None,
        limit: int = 1000,
        *,
        tenant: str | None = None,
        before_id: int | None = None,
    ) -> list[AuditEntry]:
        """The newest `limit` entries, oldest first; only of one action or tenant if given, and
        only older than entry `before_id` if given (to page back: pass the first id seen)."""
        query = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
        if action is not None:
            query = query.where(AuditRow.action == action)
        if tenant is not None:
            query = query.where(AuditRow.tenant == tenant)
        if before_id is not None:
            query = query.where(AuditRow.id < before_id)
        with store_errors(self._engine), Session(self._engine) as session:
            entries = [_entry(row) for row in session.scalars(query)]
        return entries[::-1]


def _fields(row: AuditRow) -> ChainedFields:
    return ChainedFields(
        id=row.id,
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        tenant=row.tenant,
        detail=row.detail,
        before=row.before,
        after=row.after,
        prev_hash=row.prev_hash,
    )


def _entry(row: AuditRow) -> AuditEntry:
    return AuditEntry(
        id=row.id,
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        detail=dict(row.detail),
        tenant=row.tenant,
        before=row.before,
        after=row.after,
        prev_hash=row.prev_hash,
        entry_hash=row.entry_hash,
    )
