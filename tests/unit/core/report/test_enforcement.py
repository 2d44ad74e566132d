"""What a budget enforces as spend grows, and each key's share of its tenant's spend."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.report.enforcement import (
    BudgetAction,
    BudgetRule,
    action_in_force,
    key_budget_name,
    key_spends,
    stronger,
)
from gpuplex.errors import MeterInputError

D = Decimal
ALERT, THROTTLE, BLOCK = BudgetAction.ALERT, BudgetAction.THROTTLE, BudgetAction.BLOCK


@pytest.mark.parametrize(
    ("spend", "rule", "expected"),
    [
        (D("99.99"), BudgetRule(D(100), BLOCK), ALERT),
        (D("100"), BudgetRule(D(100), BLOCK), BLOCK),
        (D("100"), BudgetRule(D(100), THROTTLE), THROTTLE),
        (D("500"), BudgetRule(D(100), ALERT), ALERT),
        (D("89.99"), BudgetRule(D(100), BLOCK, 90, THROTTLE), ALERT),
        (D("90"), BudgetRule(D(100), BLOCK, 90, THROTTLE), THROTTLE),
        (D("100"), BudgetRule(D(100), BLOCK, 90, THROTTLE), BLOCK),
        (D("0"), BudgetRule(D(0), BLOCK), BLOCK),  # a budget of 0 allows no spend
        (D("0"), BudgetRule(D(10), BLOCK), ALERT),  # a new period: spend 0 lifts the block
    ],
)
def test_action_in_force(spend: Decimal, rule: BudgetRule, expected: BudgetAction) -> None:
    assert action_in_force(spend, rule) is expected


def test_raising_the_budget_lifts_the_block() -> None:
    assert action_in_force(D(150), BudgetRule(D(100), BLOCK)) is BLOCK
    assert action_in_force(D(150), BudgetRule(D(200), BLOCK)) is ALERT


@pytest.mark.parametrize(
    ("rule", "match"),
    [
        (lambda: BudgetRule(D(-1)), "negative"),
        (lambda: BudgetRule(D(10), BLOCK, 100, THROTTLE), "soft_percent"),
        (lambda: BudgetRule(D(10), THROTTLE, 50, BLOCK), "stronger"),
    ],
)
def test_rules_that_cannot_hold_are_refused(rule: object, match: str) -> None:
    with pytest.raises(MeterInputError, match=match):
        rule()  # type: ignore[operator]


@given(
    st.lists(st.decimals(min_value=0, max_value=50, places=2), max_size=20),
    st.decimals(min_value=1, max_value=500, places=2),
    st.integers(min_value=1, max_value=99),
)
def test_as_spend_grows_the_action_only_gets_stronger(
    steps: list[Decimal], amount: Decimal, soft: int
) -> None:
    rule = BudgetRule(amount, BLOCK, soft, THROTTLE)
    spend, last = D(0), ALERT
    for step in steps:
        spend += step
        now = action_in_force(spend, rule)
        assert stronger(now, last) is now
        last = now


def test_key_spends_follow_tokens_and_add_up_to_the_tenant() -> None:
    assert key_spends(D("10.00"), {"ci": 1, "web": 2}) == {"ci": D("3.33"), "web": D("6.67")}
    assert key_spends(D("10.00"), {"ci": 0}) == {"ci": D("0.00")}
    assert key_spends(D("10.00"), {}) == {}


@given(
    st.decimals(min_value=0, max_value=100_000, places=2),
    st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 10**9), max_size=8),
)
def test_every_cent_of_a_tenant_with_traffic_lands_on_a_key(
    spend: Decimal, tokens: dict[str, int]
) -> None:
    shares = key_spends(spend, tokens)
    assert set(shares) == set(tokens)
    if sum(tokens.values()) > 0:
        assert sum(shares.values(), D(0)) == spend
    assert all(share >= 0 for share in shares.values())


def test_a_key_without_a_name_goes_by_its_prefix() -> None:
    assert key_budget_name("ci", "gpx_ab12") == "ci"
    assert key_budget_name("", "gpx_ab12") == "gpx_ab12"
