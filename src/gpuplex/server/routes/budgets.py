"""A tenant's monthly budget: spend so far this month, the month-end projection, alert thresholds
and the alerts fired. Without a budget set here, the spec's `monthly_budget` applies."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field, HttpUrl

from gpuplex.core.access import Permission
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.budget_alerts import BudgetView, budget_view
from gpuplex.server.context import ServerContext, server_context
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant

router = APIRouter(tags=["budgets"], responses=ERROR_RESPONSES)
Context = Annotated[ServerContext, Depends(server_context)]


class BudgetRequest(RequestModel):
    amount: Decimal = Field(ge=0, le=Decimal("1e12"), max_digits=18, decimal_places=2)
    thresholds_percent: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default=[50, 80, 100], min_length=1, max_length=10, description="Alert at these % of it."
    )
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
    source: str  # set (through this API) | spec (monthly_budget) | none
    amount: Decimal | None
    currency: str
    period: str  # YYYY-MM
    spend: Decimal
    projected_spend: Decimal
    thresholds_percent: list[int]
    webhook: bool  # whether alerts are POSTed to a webhook (its URL is never shown back)
    alerts: list[AlertReply]


def _reply(view: BudgetView) -> BudgetReply:
    return BudgetReply(
        tenant=view.tenant,
        source=view.source,
        amount=view.amount,
        currency=view.currency,
        period=view.period,
        spend=view.spend,
        projected_spend=view.projected_spend,
        thresholds_percent=list(view.thresholds_percent),
        webhook=view.webhook_url is not None,
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
def get_budget(tenant: str, principal: CurrentPrincipal, ctx: Context) -> BudgetReply:
    require(principal, Permission.BUDGET_READ, tenant)
    applied, _ = applied_tenant(ctx, tenant)
    return _reply(budget_view(ctx, applied, tenant, ctx.now()))


@router.put("/tenants/{tenant}/budget", response_model=BudgetReply)
def set_budget(
    tenant: str, body: BudgetRequest, principal: CurrentPrincipal, ctx: Context
) -> BudgetReply:
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(ctx, tenant)
    webhook = str(body.webhook_url) if body.webhook_url is not None else None
    if not principal.is_platform:
        # the server POSTs to the webhook from inside the operator's network: a tenant must not
        # aim it at internal addresses, so only platform admins set it; tenants keep it as it is
        if webhook is not None:
            raise ApiProblem(
                ErrorCode.FORBIDDEN,
                "webhook_url: only a platform admin sets a budget's webhook; leave it out",
                field="webhook_url",
            )
        stored = ctx.budgets.get(tenant)
        webhook = stored.webhook_url if stored is not None else None
    ctx.budgets.set(
        tenant,
        body.amount,
        applied.spec.pricing.currency,
        now=ctx.now(),
        actor=principal.actor,
        thresholds_percent=sorted(set(body.thresholds_percent)),
        webhook_url=webhook,
    )
    return _reply(budget_view(ctx, applied, tenant, ctx.now()))


@router.delete("/tenants/{tenant}/budget", response_model=BudgetReply)
def delete_budget(tenant: str, principal: CurrentPrincipal, ctx: Context) -> BudgetReply:
    """Remove the budget set here (the spec's monthly_budget, if any, applies again). A budget
    with a webhook is removed by platform admins only."""
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(ctx, tenant)
    stored = ctx.budgets.get(tenant)
    if stored is None:
        raise ApiProblem(
            ErrorCode.NOT_FOUND, f"tenant {tenant!r} has no budget set through the API"
        )
    if stored.webhook_url is not None and not principal.is_platform:
        # deleting, then putting a new budget, would drop the webhook a tenant may not change
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            "this budget has a webhook a platform admin set, which only a platform admin "
            "removes; change the amount or thresholds with PUT instead",
        )
    ctx.budgets.delete(tenant, ctx.now(), principal.actor)
    return _reply(budget_view(ctx, applied, tenant, ctx.now()))
