"""The host runtimes' events (preemptions, restarts, watchdog stops, revisions run or refused), as
each host reported them (host/log_reports.py): the control plane's event views read them here and
never read a host's state folder, so the two may run on different machines. The newest
KEPT_PER_NODE of each node are kept. Observations: not audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import HostEventRow

#: The most events kept per node; older ones go as new ones come.
KEPT_PER_NODE = 1000
#: The longest kind stored; a longer one is cut.
KIND_CHARS = 64


@dataclass(frozen=True, slots=True)
class HostEvent:
    """`tenant`: whose replica or job the event is about; None: the node's own (a GPU)."""

    node: str
    at: datetime
    kind: str
    target: str
    tenant: str | None
    message: str


class HostEvents:
    def __init__(self, engine: Engine, kept_per_node: int = KEPT_PER_NODE) -> None:
        self._engine = engine
        self._kept = kept_per_node

    def append(self, node: str, events: Sequence[HostEvent]) -> None:
        """Add `node`'s new events (oldest first), then drop what is past the newest kept."""
        if not events:
            return
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            session.add_all(
                HostEventRow(
                    node=node,
                    at=aware_utc(e.at),
                    kind=e.kind[:KIND_CHARS],
                    target=e.target,
                    tenant=e.tenant,
                    message=e.message,
                )
                for e in events
            )
            session.flush()
            oldest_kept = session.scalar(
                select(HostEventRow.id)
                .where(HostEventRow.node == node)
                .order_by(HostEventRow.id.desc())
                .offset(self._kept - 1)
                .limit(1)
            )
            if oldest_kept is not None:
                session.execute(
                    delete(HostEventRow).where(
                        HostEventRow.node == node, HostEventRow.id < oldest_kept
                    )
                )

    def newest_at(self, node: str) -> datetime | None:
        """When `node`'s newest stored event happened; None when it has none."""
        query = (
            select(HostEventRow.at)
            .where(HostEventRow.node == node)
            .order_by(HostEventRow.at.desc())
            .limit(1)
        )
        with store_errors(self._engine), Session(self._engine) as session:
            return session.scalar(query)

    def recent(self, limit: int, *, tenant: str | None = None) -> list[HostEvent]:
        """The newest `limit` events of every node, newest first; with `tenant`, only those
        about that tenant."""
        query = select(HostEventRow).order_by(HostEventRow.at.desc(), HostEventRow.id.desc())
        if tenant is not None:
            query = query.where(HostEventRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [
                HostEvent(r.node, r.at, r.kind, r.target, r.tenant, r.message)
                for r in session.scalars(query.limit(limit))
            ]
