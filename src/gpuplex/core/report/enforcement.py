"""Budget enforcement, pure: what a budget does once spend reaches it, and each API key's share of
its tenant's spend.

A budget has an `action` at 100 % of its amount and, optionally, a `soft_action` from
`soft_percent` on (e.g. throttle from 90 %, block from 100 %). The action in force is the strongest
one reached: alert < throttle < block. Spend is per period, so a new period (spend back to 0) or a
raised amount lifts whatever was in force.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from gpuplex.core.report.rounding import apportion_cents, to_cents
from gpuplex.errors import MeterInputError


class BudgetAction(StrEnum):
    """What a budget does when spend reaches it, weakest first."""

    ALERT = "alert"  # alert only (the webhook and the metric); requests go on
    THROTTLE = "throttle"  # the gateway admits at most the budget's throttle rate; 429 past it
    BLOCK = "block"  # the gateway refuses every request: 402 budget_exceeded

    @property
    def strength(self) -> int:
        return _STRENGTH[self]


_STRENGTH = {BudgetAction.ALERT: 0, BudgetAction.THROTTLE: 1, BudgetAction.BLOCK: 2}


@dataclass(frozen=True, slots=True)
class BudgetRule:
    """A budget's amount and what it does at 100 % and, if set, from `soft_percent` on."""

    amount: Decimal
    action: BudgetAction = BudgetAction.ALERT
    soft_percent: int | None = None  # 1..99
    soft_action: BudgetAction = BudgetAction.ALERT

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise MeterInputError(f"budget {self.amount} is negative: give an amount of 0 or more")
        if self.soft_percent is not None and not 1 <= self.soft_percent <= 99:
            raise MeterInputError(
                f"soft_percent {self.soft_percent}: give a percentage from 1 to 99 "
                "(the action at 100 % is `action`)"
            )
        if self.soft_action.strength > self.action.strength:
            raise MeterInputError(
                f"soft_action {self.soft_action} is stronger than action {self.action}: "
                "the soft threshold comes first, so its action is at most as strong"
            )


def reached(spend: Decimal, amount: Decimal, percent: int) -> bool:
    """Whether spend has reached `percent` of `amount`. A budget of 0 allows no spend: it is
    reached from the start."""
    return amount == 0 or spend * 100 >= amount * percent


def action_in_force(spend: Decimal, rule: BudgetRule) -> BudgetAction:
    """The strongest action whose threshold spend has reached; ALERT when none enforces anything."""
    if reached(spend, rule.amount, 100):
        return rule.action
    if rule.soft_percent is not None and reached(spend, rule.amount, rule.soft_percent):
        return rule.soft_action
    return BudgetAction.ALERT


def stronger(first: BudgetAction, second: BudgetAction) -> BudgetAction:
    return first if first.strength >= second.strength else second


def key_spends(tenant_spend: Decimal, tokens_by_key: Mapping[str, int]) -> dict[str, Decimal]:
    """The tenant's spend shared among its keys by the tokens each sent and received through the
    gateway, in cents that add up to the tenant's spend exactly (no tokens at all: nothing shared,
    every key 0). Spend the keys did not cause directly (a reserved GPU, idle time) follows the
    traffic, as the keys are what the tenant used it for."""
    if tenant_spend < 0:
        raise MeterInputError(f"spend {tenant_spend} is negative")
    if any(tokens < 0 for tokens in tokens_by_key.values()):
        raise MeterInputError("a key's token count is negative")
    names = sorted(tokens_by_key)
    total = sum(tokens_by_key.values())
    if total == 0:
        return dict.fromkeys(names, Decimal("0.00"))
    exact = [tenant_spend * tokens_by_key[name] / total for name in names]
    return dict(zip(names, apportion_cents(exact, to_cents(tenant_spend)), strict=True))


def key_budget_name(name: str, prefix: str) -> str:
    """The name a key's budget and spend go by: its name, or its prefix when it has none. Every key
    of a tenant with the same name shares one budget, so re-creating a key does not escape it."""
    return name or prefix
