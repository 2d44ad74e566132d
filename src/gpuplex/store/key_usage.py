"""Per-key usage roll-ups in the store: per roll-up window, each API key's gateway requests and
tokens, so a key's spend over a month is a sum over a few thousand windows, never a scan of every
usage record. Rolling a window up again replaces its rows, as for the tenants' roll-ups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, delete, func, insert, select

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import KeyUsageRollupRow


@dataclass(frozen=True, slots=True)
class KeyUsage:
    requests: int
    tokens: int  # prompt + completion


def key_usage_of(records: Iterable[UsageRecord]) -> dict[tuple[str, str], KeyUsage]:
    """(tenant, key prefix) -> its requests and tokens among `records`."""
    sums: dict[tuple[str, str], KeyUsage] = {}
    for record in records:
        key = (record.tenant, record.key_prefix)
        seen = sums.get(key, KeyUsage(0, 0))
        tokens = record.prompt_tokens + record.completion_tokens
        sums[key] = KeyUsage(seen.requests + 1, seen.tokens + tokens)
    return sums


class KeyUsageRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def replace_window(
        self,
        window_start: datetime,
        window_end: datetime,
        usage: Mapping[tuple[str, str], KeyUsage],
    ) -> int:
        """Make `usage` the whole of the window's per-key roll-up; returns the rows written."""
        window_start, window_end = aware_utc(window_start), aware_utc(window_end)
        rows = [
            {
                "window_start": window_start,
                "window_end": window_end,
                "tenant": tenant,
                "key_prefix": prefix,
                "requests": used.requests,
                "tokens": used.tokens,
            }
            for (tenant, prefix), used in sorted(usage.items())
        ]
        with store_errors(self._engine), self._engine.begin() as connection:
            connection.execute(
                delete(KeyUsageRollupRow).where(
                    KeyUsageRollupRow.window_start == window_start,
                    KeyUsageRollupRow.window_end == window_end,
                )
            )
            if rows:
                connection.execute(insert(KeyUsageRollupRow), rows)
        return len(rows)

    def totals(
        self, start: datetime, end: datetime, tenant: str | None = None
    ) -> dict[tuple[str, str], KeyUsage]:
        """(tenant, key prefix) -> requests and tokens summed over the windows inside [start, end)."""
        query = (
            select(
                KeyUsageRollupRow.tenant,
                KeyUsageRollupRow.key_prefix,
                func.sum(KeyUsageRollupRow.requests),
                func.sum(KeyUsageRollupRow.tokens),
            )
            .where(
                KeyUsageRollupRow.window_start >= aware_utc(start),
                KeyUsageRollupRow.window_end <= aware_utc(end),
            )
            .group_by(KeyUsageRollupRow.tenant, KeyUsageRollupRow.key_prefix)
        )
        if tenant is not None:
            query = query.where(KeyUsageRollupRow.tenant == tenant)
        with store_errors(self._engine), self._engine.connect() as connection:
            return {
                (row_tenant, prefix): KeyUsage(int(requests), int(tokens))
                for row_tenant, prefix, requests, tokens in connection.execute(query)
            }
