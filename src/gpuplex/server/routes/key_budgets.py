"""Spend per API key, and budgets per key name.

A key's spend is its share of its tenant's spend this month, by the tokens it sent and received
through the gateway (every cent of the tenant's spend lands on one of its keys once any key was
used). Keys are grouped by name (a key without a name goes by its prefix), so a budget set on a
name holds every key of that name, revoked and re-created ones included. A key budget enforces as a
tenant's does (`action`, `soft_action`), at the gateway, for the keys of that name only."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel

from gpuplex.clock import Clock
from gpuplex.core.access import Permission
from gpuplex.core.report.enforcement import BudgetAction, key_budget_name
from gpuplex.errors import ErrorCode
from gpuplex.revision import AppliedRevisions
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.budget_alerts import key_budget_views, month_figures
from gpuplex.server.budget_books import BudgetBooks
from gpuplex.server.budget_enforcement import enforce_budgets
from gpuplex.server.dependencies import Books, Current, TheClock
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.routes.budgets import (
    BudgetReply,
    EnforcementFields,
    budget_reply,
    refuse_if_locked,
)
from gpuplex.server.routes.tenants import applied_tenant

router = APIRouter(tags=["budgets"], responses=ERROR_RESPONSES)
KeyName = Annotated[str, Path(min_length=1, max_length=200)]


class KeySpendReply(BaseModel):
    name: str  # the key's name, or its prefix when it has none
    prefixes: list[str]  # the keys of that name, revoked ones included
    requests: int
    tokens: int
    spend: Decimal  # its share of the tenant's spend this month
    budget: BudgetReply | None  # the budget of that name, if one is set


class KeySpendPage(BaseModel):
    tenant: str
    period: str  # YYYY-MM
    currency: str
    tenant_spend: Decimal
    keys: list[KeySpendReply]


@router.get("/tenants/{tenant}/key-spend", response_model=KeySpendPage)
def key_spend(
    tenant: str, principal: CurrentPrincipal, current: Current, books: Books, clock: TheClock
) -> KeySpendPage:
    """Every key name of the tenant with its requests, tokens and spend this month, and its budget."""
    require(principal, Permission.BUDGET_READ, tenant)
    applied, _ = applied_tenant(current, tenant)
    figures = month_figures(books, applied, clock.utc_now())
    shares = figures.key_spend(tenant)
    budgets = {
        v.key_name: budget_reply(v) for v in key_budget_views(books, applied, tenant, figures)
    }
    prefixes: dict[str, list[str]] = {}
    for key in books.keys.list(tenant):
        prefixes.setdefault(key_budget_name(key.name, key.prefix), []).append(key.prefix)
    names = sorted(set(prefixes) | set(shares) | set(budgets))
    return KeySpendPage(
        tenant=tenant,
        period=figures.period,
        currency=applied.spec.pricing.currency,
        tenant_spend=figures.spend.get(tenant, Decimal(0)),
        keys=[
            KeySpendReply(
                name=name,
                prefixes=prefixes.get(name, []),
                requests=figures.key_requests.get((tenant, name), 0),
                tokens=figures.key_tokens.get((tenant, name), 0),
                spend=shares.get(name, Decimal("0.00")),
                budget=budgets.get(name),
            )
            for name in names
        ],
    )


@router.put("/tenants/{tenant}/key-budgets/{name}", response_model=BudgetReply)
def set_key_budget(
    tenant: str,
    name: KeyName,
    body: EnforcementFields,
    principal: CurrentPrincipal,
    current: Current,
    books: Books,
    clock: TheClock,
) -> BudgetReply:
    """Set the budget of the tenant's keys named `name` (or of the key with that prefix, if it has
    no name). A budget a platform admin set to enforce is changed by platform admins only."""
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant)
    refuse_if_locked(principal, books.budgets.get(tenant, name))
    books.budgets.set(
        tenant,
        body.amount,
        applied.spec.pricing.currency,
        now=clock.utc_now(),
        actor=principal.actor,
        thresholds_percent=sorted(set(body.thresholds_percent)),
        key_name=name,
        enforcement=body.enforcement(locked=principal.is_platform and body.enforces),
    )
    return _key_budget(current, books, clock, tenant, name)


@router.delete("/tenants/{tenant}/key-budgets/{name}", response_model=BudgetReply)
def delete_key_budget(
    tenant: str,
    name: KeyName,
    principal: CurrentPrincipal,
    current: Current,
    books: Books,
    clock: TheClock,
) -> BudgetReply:
    """Remove the budget of the tenant's keys named `name`; what it enforced is lifted at once."""
    require(principal, Permission.BUDGET_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant)
    stored = books.budgets.get(tenant, name)
    if stored is None:
        raise ApiProblem(ErrorCode.NOT_FOUND, f"tenant {tenant!r} has no budget for keys {name!r}")
    refuse_if_locked(principal, stored)
    figures = month_figures(books, applied, clock.utc_now())
    [view] = [v for v in key_budget_views(books, applied, tenant, figures) if v.key_name == name]
    books.budgets.delete(tenant, clock.utc_now(), principal.actor, key_name=name)
    enforce_budgets(books, applied, clock.utc_now())
    return budget_reply(replace(view, enforced=BudgetAction.ALERT))


def _key_budget(
    current: AppliedRevisions, books: BudgetBooks, clock: Clock, tenant: str, name: str
) -> BudgetReply:
    """The budget of `name` as it is now, after what it enforces was decided again."""
    applied, _ = applied_tenant(current, tenant)
    enforce_budgets(books, applied, clock.utc_now())
    figures = month_figures(books, applied, clock.utc_now())
    [view] = [v for v in key_budget_views(books, applied, tenant, figures) if v.key_name == name]
    return budget_reply(view)
