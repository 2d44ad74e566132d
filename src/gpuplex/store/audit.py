"""The audit log: an append-only list of who did what to which thing, written in the same
transaction as the change it records. Never holds a secret. (The control plane will hash-chain it.)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.store.db import store_errors
from gpuplex.store.tables import AuditRow


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: datetime  # timezone-aware UTC
    actor: str
    action: str  # e.g. key.create, key.revoke
    target: str  # e.g. key:1a2b3c4d
    detail: dict[str, Any]


def append_audit(
    session: Session, *, at: datetime, actor: str, action: str, target: str, detail: dict[str, Any]
) -> None:
    """Add one entry to the caller's transaction: it commits or rolls back with the change."""
    session.add(AuditRow(at=at, actor=actor, action=action, target=target, detail=detail))


class AuditLog:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def entries(self, action: str | None = None, limit: int = 1000) -> list[AuditEntry]:
        """The newest `limit` entries (optionally of one action), oldest first."""
        query = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
        if action is not None:
            query = query.where(AuditRow.action == action)
        with store_errors(self._engine), Session(self._engine) as session:
            rows = session.scalars(query).all()
            entries = [
                AuditEntry(row.id, row.at, row.actor, row.action, row.target, dict(row.detail))
                for row in rows
            ]
        return entries[::-1]
