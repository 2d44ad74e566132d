"""Budgets against spend: what a tenant's budget looks like now, and the check that fires each
alert threshold once per tenant and month (a metric, an audit entry, and a webhook if one is set).
"""

from __future__ import annotations

import json
import logging
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from gpuplex.core.meter import month_of, month_window
from gpuplex.core.report import DEFAULT_THRESHOLDS_PERCENT, budget_crossings, projected_spend
from gpuplex.revision import AppliedRevision
from gpuplex.server.context import ServerContext
from gpuplex.server.metrics.collector import count_fired_alert
from gpuplex.store.budgets import BudgetAlert

log = logging.getLogger("gpuplex.server.budgets")


@dataclass(frozen=True, slots=True)
class BudgetView:
    tenant: str
    source: str  # set | spec | none
    amount: Decimal | None
    currency: str
    period: str
    spend: Decimal
    projected_spend: Decimal
    thresholds_percent: tuple[int, ...]
    webhook_url: str | None
    alerts: list[BudgetAlert]


def budget_view(
    ctx: ServerContext,
    applied: AppliedRevision,
    tenant: str,
    now: datetime,
    spend_by_tenant: dict[str, Decimal] | None = None,
    spend_until: datetime | None = None,
) -> BudgetView:
    period = month_of(now)
    window = month_window(period)
    if spend_by_tenant is None:
        spend_by_tenant = ctx.metering.spend(window, applied)
    if spend_until is None:
        spend_until = rolled_up_to(ctx, now)
    spend = spend_by_tenant.get(tenant, Decimal(0))
    stored = ctx.budgets.get(tenant)
    declared = applied.tenant(tenant)
    spec_amount = declared.monthly_budget if declared is not None else None
    if stored is not None:
        source, amount, thresholds, webhook = (
            "set",
            stored.amount,
            stored.thresholds_percent,
            stored.webhook_url,
        )
    elif spec_amount is not None:
        source, amount, thresholds, webhook = "spec", spec_amount, DEFAULT_THRESHOLDS_PERCENT, None
    else:
        source, amount, thresholds, webhook = "none", None, (), None
    return BudgetView(
        tenant=tenant,
        source=source,
        amount=amount,
        currency=applied.spec.pricing.currency,
        period=period,
        spend=spend,
        projected_spend=projected_spend(spend, window, spend_until),
        thresholds_percent=tuple(thresholds),
        webhook_url=webhook,
        alerts=ctx.budgets.alerts(tenant, window.start),
    )


def rolled_up_to(ctx: ServerContext, now: datetime) -> datetime:
    """Where the spend so far ends: the newest roll-up window, which trails `now`."""
    newest = ctx.rollups.last_window_end("allocation")
    return now if newest is None else min(now, newest)


def check_budgets(
    ctx: ServerContext, applied: AppliedRevision, now: datetime, webhook_timeout_s: float
) -> list[BudgetAlert]:
    """Fire every threshold newly crossed this month; returns the alerts fired now."""
    window = month_window(month_of(now))
    spend = ctx.metering.spend(window, applied)
    spend_until = rolled_up_to(ctx, now)
    fired_now = []
    for name in applied.tenant_names:
        view = budget_view(ctx, applied, name, now, spend, spend_until)
        if view.amount is None:
            continue
        already = {a.threshold_percent for a in view.alerts}
        for threshold in budget_crossings(
            view.spend, view.amount, view.thresholds_percent, already
        ):
            alert = BudgetAlert(
                tenant=name,
                period_start=window.start,
                threshold_percent=threshold,
                spend=view.spend,
                budget=view.amount,
                fired_at=now,
            )
            if ctx.budgets.record_alert(alert):
                fired_now.append(alert)
                count_fired_alert(alert)
                if view.webhook_url is not None:
                    post_webhook(view.webhook_url, alert, view.currency, webhook_timeout_s)
    return fired_now


def post_webhook(url: str, alert: BudgetAlert, currency: str, timeout_s: float) -> bool:
    """POST the alert as JSON; a failing webhook is logged (without its URL), never fatal."""
    body = json.dumps(
        {
            "event": "budget.threshold_crossed",
            "tenant": alert.tenant,
            "period_start": alert.period_start.isoformat(),
            "threshold_percent": alert.threshold_percent,
            "spend": str(alert.spend),
            "budget": str(alert.budget),
            "currency": currency,
            "fired_at": alert.fired_at.isoformat(),
        }
    ).encode()
    request = urllib.request.Request(  # noqa: S310 (the URL was validated as http(s) on input)
        url, data=body, method="POST", headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as reply:  # noqa: S310
            status: int = reply.status
            return 200 <= status < 300
    except (OSError, ValueError) as error:
        log.warning("budget webhook for %s failed: %s", alert.tenant, type(error).__name__)
        return False
