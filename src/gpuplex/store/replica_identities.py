"""Who each replica a host runs is, for the gateway: the port it serves on and the Unix user it
runs as. The host runtime (`host run --follow-store`) replaces its node's rows as its replicas
change; the gateway reads them all (a row per served replica: a small table) and checks the owner
of each new connection to a replica on its own host against them (gateway/replica_identity.py).
Observations of the host, like job reports: not audited."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, select
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import ReplicaIdentityRow


@dataclass(frozen=True, slots=True)
class ReplicaIdentity:
    """A replica on `node` serving on `port`, run as `uid` (None: the host cannot vouch for
    anything answering there, so the gateway takes nothing from it); `started_at`: when its
    process last started (None: not started yet)."""

    node: str
    tenant: str
    workload: str
    replica: int
    port: int
    uid: int | None
    started_at: datetime | None = None


class ReplicaIdentities:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def publish(self, node: str, replicas: Collection[ReplicaIdentity], *, now: datetime) -> None:
        """`replicas` become the node's rows, in place of all it had (one transaction)."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            session.execute(delete(ReplicaIdentityRow).where(ReplicaIdentityRow.node == node))
            for replica in replicas:
                session.add(
                    ReplicaIdentityRow(
                        node=node,
                        tenant=replica.tenant,
                        workload=replica.workload,
                        replica=replica.replica,
                        port=replica.port,
                        uid=replica.uid,
                        started_at=(aware_utc(replica.started_at) if replica.started_at else None),
                        published_at=now,
                    )
                )

    def all(self) -> list[ReplicaIdentity]:
        query = select(ReplicaIdentityRow).order_by(
            ReplicaIdentityRow.node,
            ReplicaIdentityRow.tenant,
            ReplicaIdentityRow.workload,
            ReplicaIdentityRow.replica,
        )
        with store_errors(self._engine), Session(self._engine) as session:
            return [
                ReplicaIdentity(
                    row.node,
                    row.tenant,
                    row.workload,
                    row.replica,
                    row.port,
                    row.uid,
                    row.started_at,
                )
                for row in session.scalars(query)
            ]
