"""Budgets and budget alerts in the store.

A tenant has at most one budget: an amount per period (a calendar month) and the percentages of it
at which to alert. Setting and deleting one are audited with the budget before and after. An alert
is recorded at most once per (tenant, period, threshold): `record_alert` says whether it was new,
so the caller sends the webhook only then.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpuplex.errors import NotFoundError
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import BudgetAlertRow, BudgetRow

DEFAULT_THRESHOLDS_PERCENT = (50, 80, 100)
PERIODS = ("month",)
_CURRENCY = re.compile(r"^[A-Z]{3}$")


@dataclass(frozen=True, slots=True)
class Budget:
    tenant: str
    amount: Decimal
    currency: str  # ISO 4217, e.g. USD
    period: str  # month
    thresholds_percent: tuple[int, ...]  # ascending, e.g. (50, 80, 100)
    webhook_url: str | None
    updated_at: datetime  # timezone-aware UTC
    updated_by: str


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    tenant: str
    period_start: datetime  # timezone-aware UTC
    threshold_percent: int
    spend: Decimal
    budget: Decimal
    fired_at: datetime


class BudgetRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, tenant: str) -> Budget | None:
        query = select(BudgetRow).where(BudgetRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.scalars(query).first()
            return _budget(row) if row is not None else None

    def list(self) -> builtins.list[Budget]:
        with store_errors(self._engine), Session(self._engine) as session:
            return [_budget(row) for row in session.scalars(select(BudgetRow).order_by("tenant"))]

    def set(
        self,
        tenant: str,
        amount: Decimal,
        currency: str,
        *,
        now: datetime,
        actor: str,
        period: str = "month",
        thresholds_percent: Sequence[int] = DEFAULT_THRESHOLDS_PERCENT,
        webhook_url: str | None = None,
    ) -> Budget:
        """Create or replace the tenant's budget."""
        thresholds = _check(amount, currency, period, thresholds_percent)
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)  # read, then write: nobody in between
            row = session.scalars(select(BudgetRow).where(BudgetRow.tenant == tenant)).first()
            before = _shown(_budget(row)) if row is not None else None
            if row is None:
                row = BudgetRow(tenant=tenant)
                session.add(row)
            row.amount = amount
            row.currency = currency
            row.period = period
            row.thresholds_percent = list(thresholds)
            row.webhook_url = webhook_url
            row.updated_at = now
            row.updated_by = actor
            session.flush()
            budget = _budget(row)
            append_audit(
                session,
                at=now,
                actor=actor,
                action="budget.set",
                target=f"budget:{tenant}",
                tenant=tenant,
                before=before,
                after=_shown(budget),
            )
        return budget

    def delete(self, tenant: str, now: datetime, actor: str) -> Budget:
        """Remove the tenant's budget (its alerts stay, as history). NotFoundError if none."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)
            row = session.scalars(select(BudgetRow).where(BudgetRow.tenant == tenant)).first()
            if row is None:
                raise NotFoundError(f"tenant {tenant!r} has no budget")
            budget = _budget(row)
            session.delete(row)
            session.flush()
            append_audit(
                session,
                at=now,
                actor=actor,
                action="budget.delete",
                target=f"budget:{tenant}",
                tenant=tenant,
                before=_shown(budget),
                after=None,
            )
        return budget

    def record_alert(self, alert: BudgetAlert) -> bool:
        """Store the alert, with its audit entry, unless this threshold already fired for this
        tenant and period; True when it is new (send the webhook then, and only then)."""
        values = {
            "tenant": alert.tenant,
            "period_start": aware_utc(alert.period_start),
            "threshold_percent": alert.threshold_percent,
            "spend": alert.spend,
            "budget": alert.budget,
            "fired_at": aware_utc(alert.fired_at),
        }
        unique = ["tenant", "period_start", "threshold_percent"]
        dialect = postgresql if self._engine.dialect.name == "postgresql" else sqlite
        statement = (
            dialect.insert(BudgetAlertRow)
            .values(values)
            .on_conflict_do_nothing(index_elements=unique)
            .returning(BudgetAlertRow.id)
        )
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            new = session.execute(statement).first() is not None
            if new:  # the insert first: it takes the write lock the audit entry needs
                append_audit(
                    session,
                    at=alert.fired_at,
                    actor="gpuplex",
                    action="budget.alert",
                    target=f"budget:{alert.tenant}",
                    tenant=alert.tenant,
                    detail={
                        "period_start": aware_utc(alert.period_start).isoformat(),
                        "threshold_percent": alert.threshold_percent,
                        "spend": str(alert.spend),
                        "budget": str(alert.budget),
                    },
                )
            return new

    def alerts(
        self, tenant: str | None = None, period_start: datetime | None = None
    ) -> builtins.list[BudgetAlert]:
        """Alerts fired, oldest first; of one tenant and period where given."""
        query = select(BudgetAlertRow).order_by(BudgetAlertRow.fired_at, BudgetAlertRow.id)
        if tenant is not None:
            query = query.where(BudgetAlertRow.tenant == tenant)
        if period_start is not None:
            query = query.where(BudgetAlertRow.period_start == aware_utc(period_start))
        with store_errors(self._engine), Session(self._engine) as session:
            return [_alert(row) for row in session.scalars(query)]


def _check(
    amount: Decimal, currency: str, period: str, thresholds_percent: Sequence[int]
) -> tuple[int, ...]:
    if not isinstance(amount, Decimal) or not amount.is_finite() or amount < 0:
        raise ValueError(f"a budget is a Decimal amount of at least 0, not {amount!r}")
    if not _CURRENCY.match(currency):
        raise ValueError(f"currency {currency!r} is not an ISO 4217 code such as USD")
    if period not in PERIODS:
        raise ValueError(f"period {period!r} is not supported: use {', '.join(PERIODS)}")
    thresholds = tuple(sorted(set(thresholds_percent)))
    if not thresholds or any(t <= 0 or t > 1000 for t in thresholds):
        raise ValueError(f"thresholds {list(thresholds_percent)}: give percentages from 1 to 1000")
    return thresholds


def _shown(budget: Budget) -> dict[str, Any]:
    return {
        "amount": str(budget.amount),
        "currency": budget.currency,
        "period": budget.period,
        "thresholds_percent": list(budget.thresholds_percent),
        "webhook_url": _redacted(budget.webhook_url),
    }


def _redacted(url: str | None) -> str | None:
    """Where a webhook goes, without its path or query: those often carry its secret."""
    if url is None:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/..." if parts.scheme else "(set)"


def _budget(row: BudgetRow) -> Budget:
    return Budget(
        tenant=row.tenant,
        amount=row.amount,
        currency=row.currency,
        period=row.period,
        thresholds_percent=tuple(row.thresholds_percent),
        webhook_url=row.webhook_url,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def _alert(row: BudgetAlertRow) -> BudgetAlert:
    return BudgetAlert(
        tenant=row.tenant,
        period_start=row.period_start,
        threshold_percent=row.threshold_percent,
        spend=row.spend,
        budget=row.budget,
        fired_at=row.fired_at,
    )
