"""Budget enforcement against the store: after each roll-up (and after a budget is changed), decide
for every tenant's budget and every key name's budget what it enforces now (gpuplex.core.report's
`action_in_force`), and store that for the gateway, which refuses or throttles at admission. A new
month (spend back to 0) or a raised budget lifts what was enforced at the next decision."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from gpuplex.core.report.enforcement import BudgetAction, action_in_force
from gpuplex.revision import AppliedRevision
from gpuplex.server.budget_alerts import MonthFigures, month_figures
from gpuplex.server.budget_books import BudgetBooks
from gpuplex.store.budget_enforcement import EnforcedBudget, EnforcementChange


def enforce_budgets(
    books: BudgetBooks,
    applied: AppliedRevision,
    now: datetime,
    figures: MonthFigures | None = None,
) -> list[EnforcementChange]:
    """Store what every budget enforces now; returns the changes (each one audited)."""
    figures = figures if figures is not None else month_figures(books, applied, now)
    tenants = set(applied.tenant_names)
    currency = applied.spec.pricing.currency
    wanted = []
    key_spend: dict[str, dict[str, Decimal]] = {}
    for budget in books.budgets.list():
        if budget.tenant not in tenants:
            continue  # a tenant the applied spec no longer has: nothing to serve it
        if budget.key_name:
            shares = key_spend.setdefault(budget.tenant, figures.key_spend(budget.tenant))
            spend = shares.get(budget.key_name, Decimal(0))
        else:
            spend = figures.spend.get(budget.tenant, Decimal(0))
        action = action_in_force(spend, budget.enforcement.rule(budget.amount))
        if action is BudgetAction.ALERT:
            continue
        wanted.append(
            EnforcedBudget(
                tenant=budget.tenant,
                key_name=budget.key_name,
                action=action,
                spend=spend,
                budget=budget.amount,
                currency=currency,
                period=figures.period,
                throttle_requests_per_min=budget.enforcement.throttle_requests_per_min,
            )
        )
    return books.enforcement.replace_all(wanted, now)
