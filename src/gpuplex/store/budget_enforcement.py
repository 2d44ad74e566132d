"""The budgets the gateway enforces now, in the store: one row per tenant (key_name '') or key name
whose budget throttles or blocks it, written by the control plane after each roll-up and read by
every gateway worker as it refreshes its keys. Every change of what is enforced (a budget starts
throttling or blocking, or stops) is audited in the same transaction; the spend of a row that
stays is brought up to date without an entry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.core.report.enforcement import BudgetAction
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import BudgetEnforcementRow


@dataclass(frozen=True, slots=True)
class EnforcedBudget:
    tenant: str
    key_name: str  # '' for the tenant's own budget
    action: BudgetAction  # throttle or block
    spend: Decimal
    budget: Decimal
    currency: str
    period: str  # YYYY-MM
    throttle_requests_per_min: int
    since: datetime | None = None  # when this action began (the store sets it; None: not yet)

    @property
    def scope(self) -> tuple[str, str]:
        return (self.tenant, self.key_name)


@dataclass(frozen=True, slots=True)
class EnforcementChange:
    scope: tuple[str, str]
    before: BudgetAction | None  # None: nothing was enforced
    after: BudgetAction | None


class EnforcementRepository:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def current(self) -> list[EnforcedBudget]:
        """What is enforced now, by tenant then key name (one small query: the gateway asks often)."""
        query = select(BudgetEnforcementRow).order_by(
            BudgetEnforcementRow.tenant, BudgetEnforcementRow.key_name
        )
        with store_errors(self._engine), Session(self._engine) as session:
            return [_enforced(row) for row in session.scalars(query)]

    def replace_all(
        self, wanted: Iterable[EnforcedBudget], now: datetime, actor: str = "gpuplex"
    ) -> list[EnforcementChange]:
        """Make `wanted` what is enforced: rows no longer wanted go (lifted), new ones come, and a
        row whose action changed starts again; each of those is audited. Returns the changes."""
        now = aware_utc(now)
        wanted_by_scope = {w.scope: w for w in wanted}
        changes = []
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)
            stored = {
                (r.tenant, r.key_name): r for r in session.scalars(select(BudgetEnforcementRow))
            }
            for scope, gone in stored.items():
                if scope not in wanted_by_scope:
                    changes.append(EnforcementChange(scope, BudgetAction(gone.action), None))
                    session.delete(gone)
            for scope, want in wanted_by_scope.items():
                row = stored.get(scope)
                before = BudgetAction(row.action) if row is not None else None
                if row is None:
                    row = BudgetEnforcementRow(tenant=want.tenant, key_name=want.key_name)
                    session.add(row)
                if before is not want.action:
                    changes.append(EnforcementChange(scope, before, want.action))
                    row.since = now
                _fill(row, want)
            session.flush()
            for change in changes:
                _audit(session, change, wanted_by_scope.get(change.scope), now, actor)
        return changes


def _audit(
    session: Session,
    change: EnforcementChange,
    enforced: EnforcedBudget | None,
    now: datetime,
    actor: str,
) -> None:
    tenant, key_name = change.scope
    detail: dict[str, object] = {
        "before": change.before.value if change.before is not None else None,
        "after": change.after.value if change.after is not None else None,
    }
    if enforced is not None:
        detail.update(
            spend=str(enforced.spend), budget=str(enforced.budget), period=enforced.period
        )
    append_audit(
        session,
        at=now,
        actor=actor,
        action="budget.enforce" if change.after is not None else "budget.lift",
        target=f"budget:{tenant}/key:{key_name}" if key_name else f"budget:{tenant}",
        tenant=tenant,
        detail=detail,
    )


def _fill(row: BudgetEnforcementRow, want: EnforcedBudget) -> None:
    row.action = want.action.value
    row.spend = want.spend
    row.budget = want.budget
    row.currency = want.currency
    row.period = want.period
    row.throttle_requests_per_min = want.throttle_requests_per_min


def _enforced(row: BudgetEnforcementRow) -> EnforcedBudget:
    return EnforcedBudget(
        tenant=row.tenant,
        key_name=row.key_name,
        action=BudgetAction(row.action),
        spend=row.spend,
        budget=row.budget,
        currency=row.currency,
        period=row.period,
        throttle_requests_per_min=row.throttle_requests_per_min,
        since=row.since,
    )
