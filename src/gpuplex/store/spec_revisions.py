"""Applied specs, one revision each: the YAML as written, its SHA-256 and the plan made from it. The
revision number is the row id; the current revision is the highest.

Appending is optimistic: the caller says which revision its change is based on, and the append fails
with StaleRevisionError when another one was applied in between. The check and the insert run under
one lock (PostgreSQL: an advisory lock; SQLite: its write lock), so two appends on the same base
never both succeed. Each append writes a `spec.apply` audit entry in the same transaction, and runs
what the caller adds to it (`then`: credentials judged again under the new rules) in it too.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.errors import StaleRevisionError
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import SpecRevisionRow


@dataclass(frozen=True, slots=True)
class SpecRevision:
    revision: int
    created_at: datetime  # timezone-aware UTC
    actor: str
    spec_yaml: str
    spec_sha256: str
    plan: dict[str, Any]  # Plan.model_dump(mode="json")


class SpecRevisions:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def current(self) -> SpecRevision | None:
        """The newest revision; None before the first spec is applied."""
        query = select(SpecRevisionRow).order_by(SpecRevisionRow.id.desc()).limit(1)
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.scalars(query).first()
            return _revision(row) if row is not None else None

    def newest_number(self) -> int | None:
        """The newest revision's number, without its spec or plan: what a follower polls."""
        query = select(SpecRevisionRow.id).order_by(SpecRevisionRow.id.desc()).limit(1)
        with store_errors(self._engine), Session(self._engine) as session:
            newest: int | None = session.scalars(query).first()
            return newest

    def get(self, revision: int) -> SpecRevision | None:
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(SpecRevisionRow, revision)
            return _revision(row) if row is not None else None

    def list(self, limit: int = 50, before: int | None = None) -> builtins.list[SpecRevision]:
        """Up to `limit` revisions, newest first; only those older than `before` if given (to page
        back: pass the last revision seen)."""
        query = select(SpecRevisionRow).order_by(SpecRevisionRow.id.desc()).limit(limit)
        if before is not None:
            query = query.where(SpecRevisionRow.id < before)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_revision(row) for row in session.scalars(query)]

    def in_force(self, start: datetime, end: datetime) -> builtins.list[SpecRevision]:
        """The revisions in force at some moment of [start, end), oldest first: the newest one
        applied before `start`, and every one applied inside."""
        start, end = aware_utc(start), aware_utc(end)
        before = (
            select(SpecRevisionRow)
            .where(SpecRevisionRow.created_at < start)
            .order_by(SpecRevisionRow.id.desc())
            .limit(1)
        )
        inside = (
            select(SpecRevisionRow)
            .where(SpecRevisionRow.created_at >= start, SpecRevisionRow.created_at < end)
            .order_by(SpecRevisionRow.id)
        )
        with store_errors(self._engine), Session(self._engine) as session:
            rows = [*session.scalars(before), *session.scalars(inside)]
            return [_revision(row) for row in rows]

    def first_applied_at(self) -> datetime | None:
        """When the first revision was applied; None before any."""
        query = select(SpecRevisionRow.created_at).order_by(SpecRevisionRow.id).limit(1)
        with store_errors(self._engine), Session(self._engine) as session:
            first: datetime | None = session.scalars(query).first()
            return first

    def append(
        self,
        spec_yaml: str,
        spec_sha256: str,
        plan: Mapping[str, Any],
        actor: str,
        at: datetime,
        base_revision: int | None,
        then: Callable[[Session, int], object] | None = None,
    ) -> SpecRevision:
        """Store a new revision on top of `base_revision` (None or 0: on an empty history). Raises
        StaleRevisionError, writing nothing, when `base_revision` is not the current revision.
        `then(session, revision)` runs after the `spec.apply` entry, in the same transaction (the
        audit lock held): it commits or fails with the revision."""
        at = aware_utc(at)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.SPEC)
            previous = session.scalars(
                select(SpecRevisionRow).order_by(SpecRevisionRow.id.desc()).limit(1)
            ).first()
            current = previous.id if previous is not None else None
            if (base_revision or None) != current:
                seen = base_revision or 0
                why = (
                    f"the spec was changed since revision {seen}"
                    if seen < (current or 0)
                    else f"there is no revision {seen}"
                )
                raise StaleRevisionError(
                    f"{why}: the current revision is {current or 0}; fetch it, merge your change "
                    "and apply again",
                    base_revision=base_revision,
                    current_revision=current,
                )
            row = SpecRevisionRow(
                created_at=at,
                actor=actor,
                spec_yaml=spec_yaml,
                spec_sha256=spec_sha256,
                plan=dict(plan),
            )
            session.add(row)
            session.flush()
            append_audit(
                session,
                at=at,
                actor=actor,
                action="spec.apply",
                target=f"spec:{row.id}",
                detail={"revision": row.id, "spec_sha256": spec_sha256},
                before=_summary(previous) if previous is not None else None,
                after=_summary(row),
            )
            if then is not None:
                then(session, row.id)
            return _revision(row)


def _summary(row: SpecRevisionRow) -> dict[str, Any]:
    return {"revision": row.id, "spec_sha256": row.spec_sha256}


def _revision(row: SpecRevisionRow) -> SpecRevision:
    return SpecRevision(
        revision=row.id,
        created_at=row.created_at,
        actor=row.actor,
        spec_yaml=row.spec_yaml,
        spec_sha256=row.spec_sha256,
        plan=dict(row.plan),
    )
