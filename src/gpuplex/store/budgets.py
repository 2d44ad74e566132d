"""Budgets and budget alerts in the store.

A tenant has at most one budget of its own (key_name '') and at most one per API key name: an
amount per period (a calendar month), the percentages of it at which to alert, and what it enforces
(`action` at 100 %, `soft_action` from `soft_percent` on). A budget of a key name holds every key of
that tenant with that name, so a key re-created under the same name stays under it. Setting and
deleting one are audited with the budget before and after. An alert is recorded at most once per
(tenant, key name, period, threshold): `record_alert` says whether it was new, so the caller sends
the webhook only then.
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

from gpuplex.core.report.enforcement import BudgetAction, BudgetRule
from gpuplex.errors import NotFoundError
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import BudgetAlertRow, BudgetRow

DEFAULT_THRESHOLDS_PERCENT = (50, 80, 100)
DEFAULT_THROTTLE_REQUESTS_PER_MIN = 10
PERIODS = ("month",)
_CURRENCY = re.compile(r"^[A-Z]{3}$")


@dataclass(frozen=True, slots=True)
class Enforcement:
    """What a budget enforces, as set: the action at 100 %, the soft one from soft_percent on, and
    the rate a throttled tenant or key is held to. `locked`: only a platform admin changes it."""

    action: BudgetAction = BudgetAction.ALERT
    soft_percent: int | None = None
    soft_action: BudgetAction = BudgetAction.ALERT
    throttle_requests_per_min: int = DEFAULT_THROTTLE_REQUESTS_PER_MIN
    locked: bool = False

    def rule(self, amount: Decimal) -> BudgetRule:
        return BudgetRule(amount, self.action, self.soft_percent, self.soft_action)


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
    key_name: str = ""  # '' for the tenant's own budget
    enforcement: Enforcement = Enforcement()


@dataclass(frozen=True, slots=True)
class BudgetAlert:
    tenant: str
    period_start: datetime  # timezone-aware UTC
    threshold_percent: int
    spend: Decimal
    budget: Decimal
    fired_at: datetime
    key_name: str = ""


class BudgetRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, tenant: str, key_name: str = "") -> Budget | None:
        """The tenant's own budget, or with `key_name` the budget of its keys of that name."""
        with store_errors(self._engine), Session(self._engine) as session:
            row = _find(session, tenant, key_name)
            return _budget(row) if row is not None else None

    def list(self, tenant: str | None = None) -> builtins.list[Budget]:
        """Every budget (of one tenant, if given), the tenants' own and their keys'."""
        query = select(BudgetRow).order_by(BudgetRow.tenant, BudgetRow.key_name)
        if tenant is not None:
            query = query.where(BudgetRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_budget(row) for row in session.scalars(query)]

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
        key_name: str = "",
        enforcement: Enforcement = Enforcement(),
    ) -> Budget:
        """Create or replace the tenant's budget (or, with `key_name`, its keys' of that name)."""
        thresholds = _check(amount, currency, period, thresholds_percent)
        enforcement.rule(amount)  # a soft threshold that does not fit is a ValueError here
        if enforcement.throttle_requests_per_min < 1:
            raise ValueError("throttle_requests_per_min: give 1 or more")
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)  # read, then write: nobody in between
            row = _find(session, tenant, key_name)
            before = _shown(_budget(row)) if row is not None else None
            if row is None:
                row = BudgetRow(tenant=tenant, key_name=key_name)
                session.add(row)
            row.action = enforcement.action.value
            row.soft_percent = enforcement.soft_percent
            row.soft_action = enforcement.soft_action.value
            row.throttle_requests_per_min = enforcement.throttle_requests_per_min
            row.locked = enforcement.locked
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
                target=_target(tenant, key_name),
                tenant=tenant,
                before=before,
                after=_shown(budget),
            )
        return budget

    def delete(self, tenant: str, now: datetime, actor: str, key_name: str = "") -> Budget:
        """Remove the tenant's budget, or its keys' of `key_name` (alerts stay, as history).
        NotFoundError if none."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)
            row = _find(session, tenant, key_name)
            if row is None:
                whose = f" for its keys named {key_name!r}" if key_name else ""
                raise NotFoundError(f"tenant {tenant!r} has no budget{whose}")
            budget = _budget(row)
            session.delete(row)
            session.flush()
            append_audit(
                session,
                at=now,
                actor=actor,
                action="budget.delete",
                target=_target(tenant, key_name),
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
            "key_name": alert.key_name,
            "period_start": aware_utc(alert.period_start),
            "threshold_percent": alert.threshold_percent,
            "spend": alert.spend,
            "budget": alert.budget,
            "fired_at": aware_utc(alert.fired_at),
        }
        unique = ["tenant", "key_name", "period_start", "threshold_percent"]
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
                    target=_target(alert.tenant, alert.key_name),
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
        self, tenant: str | None = None, period_start: datetime | None = None, key_name: str = ""
    ) -> builtins.list[BudgetAlert]:
        """Alerts fired, oldest first; of one tenant (its own budget's, or its keys' of
        `key_name`) and period where given."""
        query = select(BudgetAlertRow).order_by(BudgetAlertRow.fired_at, BudgetAlertRow.id)
        if tenant is not None:
            query = query.where(
                BudgetAlertRow.tenant == tenant, BudgetAlertRow.key_name == key_name
            )
        if period_start is not None:
            query = query.where(BudgetAlertRow.period_start == aware_utc(period_start))
        with store_errors(self._engine), Session(self._engine) as session:
            return [_alert(row) for row in session.scalars(query)]


def _find(session: Session, tenant: str, key_name: str) -> BudgetRow | None:
    query = select(BudgetRow).where(BudgetRow.tenant == tenant, BudgetRow.key_name == key_name)
    return session.scalars(query).first()


def _target(tenant: str, key_name: str) -> str:
    return f"budget:{tenant}/key:{key_name}" if key_name else f"budget:{tenant}"


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
        "action": budget.enforcement.action.value,
        "soft_percent": budget.enforcement.soft_percent,
        "soft_action": budget.enforcement.soft_action.value,
        "throttle_requests_per_min": budget.enforcement.throttle_requests_per_min,
        "locked": budget.enforcement.locked,
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
        key_name=row.key_name,
        enforcement=Enforcement(
            action=BudgetAction(row.action),
            soft_percent=row.soft_percent,
            soft_action=BudgetAction(row.soft_action),
            throttle_requests_per_min=row.throttle_requests_per_min,
            locked=row.locked,
        ),
    )


def _alert(row: BudgetAlertRow) -> BudgetAlert:
    return BudgetAlert(
        tenant=row.tenant,
        period_start=row.period_start,
        threshold_percent=row.threshold_percent,
        spend=row.spend,
        budget=row.budget,
        fired_at=row.fired_at,
        key_name=row.key_name,
    )
