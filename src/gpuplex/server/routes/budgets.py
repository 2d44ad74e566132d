"""A tenant's monthly budget: spend so far this month, the month-end projection (from the run rate
over the window it names), alert thresholds, the alerts fired, and what it enforces at the gateway
(`action` at 100 %, `soft_action` from `soft_percent` on). Without a budget set here, the spec's
`monthly_budget` applies, alerting only.

Who changes what: a tenant admin sets and changes its tenant's budget, but not one a platform admin
set with an enforcing action (`locked`), which would lift a block the platform put there; nor a
webhook (`docs/security.md`)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, Field, HttpUrl, model_validator

from gpuplex.core.access import Permission, Principal
from gpuplex.core.report.enforcement import BudgetAction
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.budget_alerts import BudgetView, budget_view
from gpuplex.server.budget_enforcement import enforce_budgets
from gpuplex.server.dependencies import Books, Current, TheClock
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.store.budgets import Budget, Enforcement

router = APIRouter(tags=["budgets"], responses=ERROR_RESPONSES)


class EnforcementFields(RequestModel):
    amount: Decimal = Field(ge=0, le=Decimal("1e12"), max_digits=18, decimal_places=2)
    thresholds_percent: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default=[50, 80, 100], min_length=1, max_length=10, description="Alert at these % of it."
    )
    action: BudgetAction = Field(
        default=BudgetAction.ALERT,
        description="At 100 %: alert only, throttle (429 budget_throttled) or block (402 "
        "budget_exceeded) at the gateway.",
    )
    soft_percent: int | None = Field(
        default=None, ge=1, le=99, description="Apply soft_action from this % of the budget on."
    )
    soft_action: BudgetAction = BudgetAction.ALERT
    throttle_requests_per_min: int = Field(default=10, ge=1, le=1_000_000)

    @property
    def enforces(self) -> bool:
        """Whether it does more than alert, at 100 % or at its soft threshold."""
        return self.action is not BudgetAction.ALERT or self.soft_action is not BudgetAction.ALERT

    def enforcement(self, locked: bool) -> Enforcement:
        return Enforcement(
            self.action,
            self.soft_percent,
            self.soft_action,
            self.throttle_requests_per_min,
            locked,
        )

    @model_validator(mode="after")
    def _soft_no_stronger(self) -> EnforcementFields:
        if self.soft_action.strength > self.action.strength:
            raise ValueError(
                f"soft_action {self.soft_action} is stronger than action {self.action}"
            )
        return self


class BudgetRequest(EnforcementFields):
    webhook_url: HttpUrl | None = Field(
        default=None,
        description="POSTed a JSON alert when a threshold is crossed. Platform admins only; "
        "a tenant admin's update keeps the webhook as it is.",
    )


class AlertReply(BaseModel):
    threshold_percent: int
    spend: Decimal
    budget: Decimal
    fired_at: datetime


class BudgetReply(BaseModel):
    tenant: str
    key_name: str | None = None  # the key name whose budget this is; None: the tenant's own
    source: str  # set (through this API) | spec (monthly_budget) | none
    amount: Decimal | None
    currency: str
    period: str  # YYYY-MM
    spend: Decimal
    projected_spend: Decimal
    projection_window_start: datetime | None = Field(
        description="The run rate the projection follows is spend over this window: the last "
        "24 h, or since the first spend this month when that is shorter. None: no spend yet."
    )
    projection_window_end: datetime | None
    thresholds_percent: list[int]
    webhook: bool  # whether alerts are POSTed to a webhook (its URL is never shown back)
    action: BudgetAction
    soft_percent: int | None
    soft_action: BudgetAction
    throttle_requests_per_min: int
    locked: bool  # set by a platform admin with an enforcing action: only one changes it
    enforced: BudgetAction  # what the gateway enforces now (alert: nothing)
    alerts: list[AlertReply]


def budget_reply(view: BudgetView) -> BudgetReply:
    window = view.projection_window
    enforcement = view.enforcement
    return BudgetReply(
        tenant=view.tenant,
        key_name=view.key_name or None,
        source=view.source,
        amount=view.amount,
        currency=view.currency,
        period=view.period,
        spend=view.spend,
        projected_spend=view.projected_spend,
        projection_window_start=window.start if window is not None else None,
        projection_window_end=window.end if window is not None else None,
        thresholds_percent=list(view.thresholds_percent),
        webhook=view.webhook_url is not None,
        action=enforcement.action,
        soft_percent=enforcement.soft_percent,
        soft_action=enforcement.soft_action,
        throttle_requests_per_min=enforcement.throttle_requests_per_min,
        locked=enforcement.locked,
        enforced=view.enforced,
        alerts=[
            AlertReply(
                threshold_percent=a.threshold_percent,
                spend=a.spend,
                budget=a.budget,
                fired_at=a.fired_at,
            )
            for a in view.alerts
        ],
    )


@router.get("/tenants/{tenant}/budget", response_model=BudgetReply)
def get_budget(
    tenant: str, principal: CurrentPrincipal, current: Current, books: Books, clock: TheClock
) -> BudgetReply:
    require(principal, Permission.BUDGET_READ, tenant)
    applied, _ = applied_tenant(current, tenant)
    return budget_reply(budget_view(books, applied, tenant, clock.utc_now()))


@router.put("/tenants/{tenant}/budget", response_model=BudgetReply)
def set_budget(
    tenant: str,
    body: BudgetRequest,
    principal: CurrentPrincipal,
    current: Current,
    books: Books,
    clock: TheClock,
) -> BudgetReply:
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant)
    webhook = str(body.webhook_url) if body.webhook_url is not None else None
    refuse_if_locked(principal, books.budgets.get(tenant))
    if not principal.is_platform:
        # the server POSTs to the webhook from inside the operator's network: a tenant must not
        # aim it at internal addresses, so only platform admins set it; tenants keep it as it is
        if webhook is not None:
            raise ApiProblem(
                ErrorCode.FORBIDDEN,
                "webhook_url: only a platform admin sets a budget's webhook; leave it out",
                field="webhook_url",
            )
        stored = books.budgets.get(tenant)
        webhook = stored.webhook_url if stored is not None else None
    books.budgets.set(
        tenant,
        body.amount,
        applied.spec.pricing.currency,
        now=clock.utc_now(),
        actor=principal.actor,
        thresholds_percent=sorted(set(body.thresholds_percent)),
        webhook_url=webhook,
        enforcement=body.enforcement(locked=principal.is_platform and body.enforces),
    )
    enforce_budgets(books, applied, clock.utc_now())  # a raised budget lifts a block now
    return budget_reply(budget_view(books, applied, tenant, clock.utc_now()))


@router.delete("/tenants/{tenant}/budget", response_model=BudgetReply)
def delete_budget(
    tenant: str, principal: CurrentPrincipal, current: Current, books: Books, clock: TheClock
) -> BudgetReply:
    """Remove the budget set here (the spec's monthly_budget, if any, applies again). A budget
    with a webhook is removed by platform admins only."""
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant)
    stored = books.budgets.get(tenant)
    if stored is None:
        raise ApiProblem(
            ErrorCode.NOT_FOUND, f"tenant {tenant!r} has no budget set through the API"
        )
    refuse_if_locked(principal, stored)
    if stored.webhook_url is not None and not principal.is_platform:
        # deleting, then putting a new budget, would drop the webhook a tenant may not change
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            "this budget has a webhook a platform admin set, which only a platform admin "
            "removes; change the amount or thresholds with PUT instead",
        )
    books.budgets.delete(tenant, clock.utc_now(), principal.actor)
    enforce_budgets(books, applied, clock.utc_now())
    return budget_reply(budget_view(books, applied, tenant, clock.utc_now()))


def refuse_if_locked(principal: Principal, stored: Budget | None) -> None:
    """A tenant admin may not change or remove a budget a platform admin set to enforce: that
    would lift the throttle or block the platform put on the tenant."""
    if stored is not None and stored.enforcement.locked and not principal.is_platform:
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            f"a platform admin set this budget to {stored.enforcement.action} at 100 %; "
            "only a platform admin changes or removes it",
        )
