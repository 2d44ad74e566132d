"""Usage roll-ups in the store: per window, tenant, source, metric and dimension, one quantity.

A roll-up of a window replaces all of that window's rows of that source in one transaction, so
rolling the same window up again (after a crash, or with late samples) never counts twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Literal, Protocol, get_args

from sqlalchemy import Engine, delete, func, insert, select
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import UsageRollupRow

RollupSource = Literal["allocation", "measured", "gateway"]
ROLLUP_SOURCES: tuple[str, ...] = get_args(RollupSource)


class MeterLineLike(Protocol):
    """One metered quantity of one tenant (gpuplex.core.meter's MeterLine has this shape)."""

    @property
    def tenant(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def metric(self) -> str: ...
    @property
    def dimension(self) -> str: ...
    @property
    def quantity(self) -> Decimal: ...


@dataclass(frozen=True, slots=True)
class UsageRollup:
    window_start: datetime  # timezone-aware UTC
    window_end: datetime
    tenant: str
    source: str  # allocation | measured | gateway
    metric: str  # e.g. gpu_seconds, memory_mib_seconds, prompt_tokens
    dimension: str  # e.g. the GPU model and mode, or the model name; '' when none
    quantity: Decimal


class RollupRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def replace_window(
        self,
        window_start: datetime,
        window_end: datetime,
        source: str,
        lines: Sequence[MeterLineLike],
    ) -> int:
        """Make `lines` the whole of `source`'s roll-up for [window_start, window_end): the old rows
        go and the new ones come in one transaction. Returns how many rows were written."""
        window_start, window_end = aware_utc(window_start), aware_utc(window_end)
        _check(window_start, window_end, source, lines)
        rows = [
            {
                "window_start": window_start,
                "window_end": window_end,
                "tenant": line.tenant,
                "source": source,
                "metric": line.metric,
                "dimension": line.dimension,
                "quantity": line.quantity,
            }
            for line in lines
        ]
        with store_errors(self._engine), self._engine.begin() as connection:
            connection.execute(
                delete(UsageRollupRow).where(
                    UsageRollupRow.window_start == window_start,
                    UsageRollupRow.window_end == window_end,
                    UsageRollupRow.source == source,
                )
            )
            if rows:
                connection.execute(insert(UsageRollupRow), rows)
        return len(rows)

    def query(
        self,
        tenant: str | None,
        start: datetime,
        end: datetime,
        source: str | None = None,
        metric: str | None = None,
    ) -> list[UsageRollup]:
        """The rows of windows inside [start, end), oldest window first; of one tenant, source and
        metric where given."""
        query = (
            select(UsageRollupRow)
            .where(
                UsageRollupRow.window_start >= aware_utc(start),
                UsageRollupRow.window_end <= aware_utc(end),
            )
            .order_by(
                UsageRollupRow.window_start,
                UsageRollupRow.tenant,
                UsageRollupRow.source,
                UsageRollupRow.metric,
                UsageRollupRow.dimension,
            )
        )
        if tenant is not None:
            query = query.where(UsageRollupRow.tenant == tenant)
        if source is not None:
            query = query.where(UsageRollupRow.source == source)
        if metric is not None:
            query = query.where(UsageRollupRow.metric == metric)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_rollup(row) for row in session.scalars(query)]

    def totals(self, start: datetime, end: datetime) -> dict[tuple[str, str, str, str], Decimal]:
        """Every (tenant, source, metric, dimension)'s quantity summed over the windows inside
        [start, end): what a statement needs, without a row object per window."""
        query = select(
            UsageRollupRow.tenant,
            UsageRollupRow.source,
            UsageRollupRow.metric,
            UsageRollupRow.dimension,
            UsageRollupRow.quantity,
        ).where(
            UsageRollupRow.window_start >= aware_utc(start),
            UsageRollupRow.window_end <= aware_utc(end),
        )
        sums: dict[tuple[str, str, str, str], Decimal] = {}
        with store_errors(self._engine), self._engine.connect() as connection:
            for tenant, source, metric, dimension, quantity in connection.execute(query):
                key = (tenant, source, metric, dimension)
                sums[key] = sums.get(key, Decimal(0)) + quantity
        return sums

    def fingerprint(self) -> tuple[int, int]:
        """(rows, highest id): changes whenever a roll-up writes, since replacing a window gives
        its rows new ids and an emptied window has fewer rows. Costs milliseconds, where summing
        a month of windows costs a sizeable fraction of a second."""
        query = select(func.count(), func.coalesce(func.max(UsageRollupRow.id), 0))
        with store_errors(self._engine), self._engine.connect() as connection:
            rows, highest = connection.execute(query).one()
        return int(rows), int(highest)

    def first_window_starts(self, start: datetime, end: datetime) -> dict[str, datetime]:
        """Each tenant's first window inside [start, end) with a roll-up row (the roll-up writes
        only what was used or held): when it began to use anything in that range."""
        query = (
            select(UsageRollupRow.tenant, func.min(UsageRollupRow.window_start))
            .where(
                UsageRollupRow.window_start >= aware_utc(start),
                UsageRollupRow.window_end <= aware_utc(end),
            )
            .group_by(UsageRollupRow.tenant)
        )
        with store_errors(self._engine), self._engine.connect() as connection:
            return {tenant: aware_utc(first) for tenant, first in connection.execute(query)}

    def last_window_end(self, source: str) -> datetime | None:
        """Where `source`'s roll-ups end so far (None: never rolled up), to resume from."""
        query = select(func.max(UsageRollupRow.window_end)).where(UsageRollupRow.source == source)
        with store_errors(self._engine), Session(self._engine) as session:
            return session.scalars(query).one()


def _check(
    window_start: datetime, window_end: datetime, source: str, lines: Sequence[MeterLineLike]
) -> None:
    if window_end <= window_start:
        raise ValueError(f"empty window: it ends ({window_end}) before it starts ({window_start})")
    if source not in ROLLUP_SOURCES:
        raise ValueError(f"unknown source {source!r}: use one of {', '.join(ROLLUP_SOURCES)}")
    seen: set[tuple[str, str, str]] = set()
    for line in lines:
        if line.source != source:
            raise ValueError(f"a {line.source!r} line in a {source!r} roll-up: roll up per source")
        key = (line.tenant, line.metric, line.dimension)
        if key in seen:
            raise ValueError(f"two lines for tenant, metric and dimension {key}: add them first")
        seen.add(key)


def _rollup(row: UsageRollupRow) -> UsageRollup:
    return UsageRollup(
        window_start=row.window_start,
        window_end=row.window_end,
        tenant=row.tenant,
        source=row.source,
        metric=row.metric,
        dimension=row.dimension,
        quantity=row.quantity,
    )
