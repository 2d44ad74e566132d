"""Usage records in the store. Inserts are idempotent by `request_id` (INSERT ... ON CONFLICT DO
NOTHING), so the gateway's spool mover may move the same batch twice after a crash and every
request still counts once."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpuplex.core.serve.latency_summary import LatencySample
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.store.db import store_errors
from gpuplex.store.tables import UsageRow


class UsageRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def insert_many(self, records: Sequence[UsageRecord]) -> int:
        """Store the records not already stored; returns how many were new."""
        rows = list({record.request_id: _row(record) for record in records}.values())
        if not rows:
            return 0
        with store_errors(self._engine), self._engine.begin() as connection:
            if self._engine.dialect.name == "postgresql":
                new = (
                    postgresql.insert(UsageRow)
                    .on_conflict_do_nothing(index_elements=[UsageRow.request_id])
                    .returning(UsageRow.request_id)
                )
                return len(connection.execute(new, rows).all())
            # SQLite sums an executemany's changed rows, so no RETURNING is needed: without it
            # the insert costs the spool mover (inside a gateway worker) half the CPU
            ignored = sqlite.insert(UsageRow).on_conflict_do_nothing(
                index_elements=[UsageRow.request_id]
            )
            return connection.execute(ignored, rows).rowcount

    def count(self, tenant: str | None = None) -> int:
        query = select(func.count(UsageRow.id))
        if tenant is not None:
            query = query.where(UsageRow.tenant == tenant)
        with store_errors(self._engine), self._engine.connect() as connection:
            return int(connection.execute(query).scalar_one())

    def request_ids(self) -> set[str]:
        with store_errors(self._engine), self._engine.connect() as connection:
            return set(connection.execute(select(UsageRow.request_id)).scalars())

    def records(
        self,
        tenant: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[UsageRecord]:
        """Records that started in [since, until), of one tenant if given, oldest first."""
        query = select(UsageRow).order_by(UsageRow.started_at, UsageRow.id)
        if tenant is not None:
            query = query.where(UsageRow.tenant == tenant)
        if since is not None:
            query = query.where(UsageRow.started_at >= since)
        if until is not None:
            query = query.where(UsageRow.started_at < until)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_record(row) for row in session.scalars(query)]

    def latency_samples(
        self, tenant: str, since: datetime, until: datetime, limit: int
    ) -> list[LatencySample]:
        """The latency of the tenant's newest `limit` requests that started in [since, until)
        and reached the fair queue (the others have none)."""
        query = (
            select(UsageRow.model, UsageRow.queue_wait_s, UsageRow.ttft_s, UsageRow.itl_s)
            .where(UsageRow.tenant == tenant)
            .where(UsageRow.started_at >= since)
            .where(UsageRow.started_at < until)
            .where(UsageRow.queue_wait_s.is_not(None) | UsageRow.ttft_s.is_not(None))
            .order_by(UsageRow.started_at.desc())
            .limit(limit)
        )
        with store_errors(self._engine), self._engine.connect() as connection:
            return [LatencySample(*row) for row in connection.execute(query)]

    def totals_by_tenant(self) -> dict[str, tuple[int, int]]:
        """tenant -> (requests, prompt + completion tokens)."""
        query = select(
            UsageRow.tenant,
            func.count(UsageRow.id),
            func.coalesce(func.sum(UsageRow.prompt_tokens + UsageRow.completion_tokens), 0),
        ).group_by(UsageRow.tenant)
        with store_errors(self._engine), self._engine.connect() as connection:
            return {
                tenant: (int(requests), int(tokens))
                for tenant, requests, tokens in connection.execute(query)
            }


def _row(record: UsageRecord) -> dict[str, Any]:
    return record.fields()


def _record(row: UsageRow) -> UsageRecord:
    return UsageRecord(
        request_id=row.request_id,
        tenant=row.tenant,
        key_prefix=row.key_prefix,
        model=row.model,
        endpoint=row.endpoint,
        status=row.status,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        latency_s=row.latency_s,
        started_at=row.started_at,
        stream=row.stream,
        queue_wait_s=row.queue_wait_s,
        ttft_s=row.ttft_s,
        itl_s=row.itl_s,
    )
