"""What the control plane's /metrics reads from the store at scrape time, summed by the database.

Roll-up totals are counters over all time. Summing every window at every scrape would grow with the
store's age, so windows that started before a settled boundary (an hour before the newest whole hour,
counted from the newest window rolled up, so that windows caught up after a downtime still count)
are summed once and kept; only the newer windows are summed at each scrape. A settled window that is
rolled up again later (`POST /meter/rollup` over an old range) shows in these totals only after the
server restarts; statements always read the roll-ups themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Numeric, Select, and_, cast, func, select
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import GpuSampleRow, UsageRollupRow

#: (tenant, source, metric, dimension); tenant '' is the fleet's own lines (capacity).
RollupKey = tuple[str, str, str, str]
#: Windows that started this long before the newest whole hour are taken as final.
SETTLE_S = 3600
#: Roll-up quantities are exact to the microsecond; sums are reported to this many decimals.
DIGITS = 6


class RollupTotals:
    """Sum of every roll-up row's quantity per (tenant, source, metric, dimension), all time."""

    def __init__(self, engine: Engine, settle_s: int = SETTLE_S) -> None:
        self._engine = engine
        self._settle = timedelta(seconds=settle_s)
        self._lock = threading.Lock()
        self._settled: dict[RollupKey, float] = {}
        self._settled_before: datetime | None = None

    def totals(self, now: datetime) -> dict[RollupKey, float]:
        # settle behind the newest window rolled up, not behind now: after a downtime the roll-up
        # job catches up on windows older than now - settle, and they must still be summed
        newest = self._newest_window_start()
        if newest is None:
            return {}  # nothing rolled up yet
        boundary = _hour_floor(min(aware_utc(now), newest) - self._settle)
        with self._lock:
            if self._settled_before is None or boundary > self._settled_before:
                since = self._settled_before
                _add(self._settled, self._sums(since, boundary))
                self._settled_before = boundary
            settled_before = self._settled_before
            totals = dict(self._settled)
        _add(totals, self._sums(settled_before, None))
        return totals

    def _newest_window_start(self) -> datetime | None:
        query = select(func.max(UsageRollupRow.window_start))
        with store_errors(self._engine), Session(self._engine) as session:
            newest = session.scalars(query).one()
        return None if newest is None else aware_utc(newest)

    def _sums(
        self, since: datetime | None, until: datetime | None
    ) -> Iterable[tuple[RollupKey, float]]:
        row = UsageRollupRow
        query = select(
            row.tenant,
            row.source,
            row.metric,
            row.dimension,
            func.sum(cast(row.quantity, Numeric(asdecimal=False))),
        ).group_by(row.tenant, row.source, row.metric, row.dimension)
        if since is not None:
            query = query.where(row.window_start >= since)
        if until is not None:
            query = query.where(row.window_start < until)
        with store_errors(self._engine), self._engine.connect() as connection:
            found = connection.execute(query).all()
        # exact on PostgreSQL; SQLite sums floats: keep the microsecond digits, drop float noise
        return [((t, s, m, d), round(float(q or 0.0), DIGITS)) for t, s, m, d, q in found]


@dataclass(frozen=True, slots=True)
class HeldSample:
    """The newest sample of one replica on one GPU."""

    node: str
    gpu_index: int
    gpu_uuid: str | None
    tenant: str
    workload: str
    replica: int
    memory_used_mib: int
    utilization_percent: float | None


def latest_samples(engine: Engine, since: datetime, until: datetime) -> list[HeldSample]:
    """Per replica and GPU, its newest sample taken in [since, until]: replicas that stopped being
    sampled before `since` are not reported. Each node's sampler keeps its own clock."""
    row = GpuSampleRow
    key = (row.node, row.gpu_index, row.tenant, row.workload, row.replica)
    newest = (
        select(*key, func.max(row.at).label("at"))
        .where(row.at >= aware_utc(since), row.at <= aware_utc(until))
        .group_by(*key)
        .subquery()
    )
    query: Select[GpuSampleRow] = (
        select(row)
        .join(
            newest,
            and_(
                row.node == newest.c.node,
                row.gpu_index == newest.c.gpu_index,
                row.tenant == newest.c.tenant,
                row.workload == newest.c.workload,
                row.replica == newest.c.replica,
                row.at == newest.c.at,
            ),
        )
        .order_by(row.id)
    )
    held: dict[tuple[str, int, str, str, int], HeldSample] = {}
    with store_errors(engine), Session(engine) as session:
        for sample in session.scalars(query):
            held[sample.node, sample.gpu_index, sample.tenant, sample.workload, sample.replica] = (
                HeldSample(
                    node=sample.node,
                    gpu_index=sample.gpu_index,
                    gpu_uuid=sample.gpu_uuid,
                    tenant=sample.tenant,
                    workload=sample.workload,
                    replica=sample.replica,
                    memory_used_mib=sample.memory_used_mib,
                    utilization_percent=sample.utilization_percent,
                )
            )
    return list(held.values())


def _add(into: dict[RollupKey, float], sums: Iterable[tuple[RollupKey, float]]) -> None:
    for key, quantity in sums:
        into[key] = round(into.get(key, 0.0) + quantity, DIGITS)


def _hour_floor(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)
