"""Budgets against spend: what a tenant's (or a key name's) budget looks like now, with the month-end
projection from the recent run rate, and the check that fires each alert threshold once per budget
and month (a metric, an audit entry, and a webhook if one is set).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from gpuplex.core.meter import MeterWindow, month_of, month_window
from gpuplex.core.report.budget import (
    DEFAULT_THRESHOLDS_PERCENT,
    RUN_RATE_WINDOW_S,
    budget_crossings,
    projected_spend,
    run_rate_window,
)
from gpuplex.core.report.enforcement import BudgetAction, key_budget_name, key_spends
from gpuplex.http_client import call
from gpuplex.revision import AppliedRevision
from gpuplex.server.budget_books import BudgetBooks
from gpuplex.server.metrics.collector import count_fired_alert
from gpuplex.store.budget_enforcement import EnforcedBudget
from gpuplex.store.budgets import Budget, BudgetAlert, Enforcement

log = logging.getLogger("gpuplex.server.budgets")

#: A webhook's answer is not read past this: only its status counts.
WEBHOOK_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class MonthFigures:
    """What every budget of the month is measured against, read once per check or request."""

    period: str  # YYYY-MM
    window: MeterWindow
    spend_until: datetime  # where the rolled-up spend ends
    spend: dict[str, Decimal]  # tenant -> spend this month so far
    recent_spend: dict[str, Decimal]  # tenant -> spend in the last RUN_RATE_WINDOW_S
    first_spend_at: dict[str, datetime]  # tenant -> its first window with usage this month
    key_tokens: dict[tuple[str, str], int]  # (tenant, key name) -> tokens this month
    key_requests: dict[tuple[str, str], int]
    enforced: dict[tuple[str, str], EnforcedBudget]  # what the gateway enforces now

    def projection(self, tenant: str) -> tuple[Decimal, MeterWindow | None]:
        """The tenant's month-end projection and the window its run rate was measured over."""
        recent = run_rate_window(self.window, self.spend_until, self.first_spend_at.get(tenant))
        spend = self.spend.get(tenant, Decimal(0))
        return projected_spend(
            spend, self.recent_spend.get(tenant, Decimal(0)), recent, self.window
        ), recent

    def key_spend(self, tenant: str) -> dict[str, Decimal]:
        """Key name -> its share of the tenant's spend this month, by tokens."""
        tokens = {name: n for (t, name), n in self.key_tokens.items() if t == tenant}
        return key_spends(self.spend.get(tenant, Decimal(0)), tokens)


def month_figures(books: BudgetBooks, applied: AppliedRevision, now: datetime) -> MonthFigures:
    period = month_of(now)
    window = month_window(period)
    spend_until = rolled_up_to(books, now)
    recent_start = max(window.start, spend_until - timedelta(seconds=RUN_RATE_WINDOW_S))
    recent_spend = (
        books.metering.spend(MeterWindow(recent_start, spend_until), applied)
        if spend_until > recent_start
        else {}
    )
    names = {key.prefix: key_budget_name(key.name, key.prefix) for key in books.keys.list()}
    key_tokens: dict[tuple[str, str], int] = {}
    key_requests: dict[tuple[str, str], int] = {}
    for (tenant, prefix), used in books.key_usage.totals(window.start, window.end).items():
        scope = (tenant, names.get(prefix, prefix))
        key_tokens[scope] = key_tokens.get(scope, 0) + used.tokens
        key_requests[scope] = key_requests.get(scope, 0) + used.requests
    return MonthFigures(
        period=period,
        window=window,
        spend_until=spend_until,
        spend=books.metering.spend(window, applied),
        recent_spend=recent_spend,
        first_spend_at=books.metering.first_spend(window),
        key_tokens=key_tokens,
        key_requests=key_requests,
        enforced={e.scope: e for e in books.enforcement.current()},
    )


@dataclass(frozen=True, slots=True)
class BudgetView:
    tenant: str
    key_name: str  # '' for the tenant's own budget
    source: str  # set | spec | none
    amount: Decimal | None
    currency: str
    period: str
    spend: Decimal
    projected_spend: Decimal
    projection_window: MeterWindow | None  # the run rate's window; None: no spend yet
    thresholds_percent: tuple[int, ...]
    webhook_url: str | None
    enforcement: Enforcement  # what it enforces, as set
    enforced: BudgetAction  # what the gateway enforces now (ALERT: nothing)
    alerts: list[BudgetAlert]


def budget_view(
    books: BudgetBooks,
    applied: AppliedRevision,
    tenant: str,
    now: datetime,
    figures: MonthFigures | None = None,
) -> BudgetView:
    """The tenant's own budget now: set through the API, else the spec's monthly_budget."""
    figures = figures if figures is not None else month_figures(books, applied, now)
    stored = books.budgets.get(tenant)
    declared = applied.tenant(tenant)
    spec_amount = declared.monthly_budget if declared is not None else None
    if stored is None and spec_amount is not None:
        return _view(figures, applied, tenant, "", "spec", spec_amount, None, books)
    return _view(figures, applied, tenant, "", "set" if stored else "none", None, stored, books)


def key_budget_views(
    books: BudgetBooks, applied: AppliedRevision, tenant: str, figures: MonthFigures
) -> list[BudgetView]:
    """The budgets of the tenant's key names."""
    return [
        _view(figures, applied, tenant, b.key_name, "set", None, b, books)
        for b in books.budgets.list(tenant)
        if b.key_name
    ]


def _view(
    figures: MonthFigures,
    applied: AppliedRevision,
    tenant: str,
    key_name: str,
    source: str,
    spec_amount: Decimal | None,
    stored: Budget | None,
    books: BudgetBooks,
) -> BudgetView:
    projected, recent = figures.projection(tenant)
    spend = figures.spend.get(tenant, Decimal(0))
    if key_name:  # a key's share of its tenant's spend, projected in the same proportion
        spend = figures.key_spend(tenant).get(key_name, Decimal(0))
        whole = figures.spend.get(tenant, Decimal(0))
        projected = (projected * spend / whole).quantize(Decimal("0.01")) if whole else spend
    enforced = figures.enforced.get((tenant, key_name))
    return BudgetView(
        tenant=tenant,
        key_name=key_name,
        source=source,
        amount=stored.amount if stored is not None else spec_amount,
        currency=applied.spec.pricing.currency,
        period=figures.period,
        spend=spend,
        projected_spend=projected,
        projection_window=recent,
        thresholds_percent=tuple(stored.thresholds_percent)
        if stored is not None
        else (DEFAULT_THRESHOLDS_PERCENT if spec_amount is not None else ()),
        webhook_url=stored.webhook_url if stored is not None else None,
        enforcement=stored.enforcement if stored is not None else Enforcement(),
        enforced=enforced.action if enforced is not None else BudgetAction.ALERT,
        alerts=books.budgets.alerts(tenant, figures.window.start, key_name),
    )


def rolled_up_to(books: BudgetBooks, now: datetime) -> datetime:
    """Where the spend so far ends: the newest roll-up window, which trails `now`."""
    newest = books.rollups.last_window_end("allocation")
    return now if newest is None else min(now, newest)


def check_budgets(
    books: BudgetBooks,
    applied: AppliedRevision,
    now: datetime,
    webhook_timeout_s: float,
    figures: MonthFigures | None = None,
) -> list[BudgetAlert]:
    """Fire every threshold newly crossed this month, of the tenants' budgets and their keys';
    returns the alerts fired now."""
    figures = figures if figures is not None else month_figures(books, applied, now)
    fired_now = []
    for name in applied.tenant_names:
        views = [budget_view(books, applied, name, now, figures)]
        views += key_budget_views(books, applied, name, figures)
        for view in views:
            if view.amount is None:
                continue
            already = {a.threshold_percent for a in view.alerts}
            for threshold in budget_crossings(
                view.spend, view.amount, view.thresholds_percent, already
            ):
                alert = BudgetAlert(
                    tenant=name,
                    period_start=figures.window.start,
                    threshold_percent=threshold,
                    spend=view.spend,
                    budget=view.amount,
                    fired_at=now,
                    key_name=view.key_name,
                )
                if books.budgets.record_alert(alert):
                    fired_now.append(alert)
                    count_fired_alert(alert)
                    if view.webhook_url is not None:
                        post_webhook(view.webhook_url, alert, view, webhook_timeout_s)
    return fired_now


def post_webhook(url: str, alert: BudgetAlert, view: BudgetView, timeout_s: float) -> bool:
    """POST the alert as JSON; a failing webhook is logged (without its URL), never fatal."""
    window = view.projection_window
    body = json.dumps(
        {
            "event": "budget.threshold_crossed",
            "tenant": alert.tenant,
            "key_name": alert.key_name or None,
            "period_start": alert.period_start.isoformat(),
            "threshold_percent": alert.threshold_percent,
            "spend": str(alert.spend),
            "budget": str(alert.budget),
            "currency": view.currency,
            "projected_spend": str(view.projected_spend),
            "projection_window_start": window.start.isoformat() if window else None,
            "projection_window_end": window.end.isoformat() if window else None,
            "action": view.enforcement.action.value,
            "fired_at": alert.fired_at.isoformat(),
        }
    ).encode()
    try:
        answer = call(
            "POST",
            url,  # validated as http(s) on input
            headers={"content-type": "application/json"},
            body=body,
            timeout_s=timeout_s,
            deadline_s=timeout_s,
            max_bytes=WEBHOOK_ANSWER_BYTES,
        )
    except OSError as error:
        log.warning("budget webhook for %s failed: %s", alert.tenant, type(error).__name__)
        return False
    if not answer.ok:
        log.warning("budget webhook for %s failed: it answered %d", alert.tenant, answer.status)
    return answer.ok
