"""Cents by largest remainder: parts add up to the rounded whole, each within a cent."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.report.rounding import apportion_cents, to_cents

D = Decimal


@pytest.mark.parametrize(
    ("amounts", "total", "expected"),
    [
        ([D(1) / 3] * 3, D("1.00"), [D("0.34"), D("0.33"), D("0.33")]),  # tie: the first
        ([D("0.004"), D("0.006")], D("0.01"), [D("0.00"), D("0.01")]),  # the larger remainder
        ([D("39"), D("16.7142857"), D("19.5"), D("41.7857143")], D("117.00"),
         [D("39.00"), D("16.71"), D("19.50"), D("41.79")]),
        ([D("-0.005"), D("0.015")], D("0.01"), [D("0.00"), D("0.01")]),  # negatives floor down
        ([D("-0.004"), D("0.004")], D("0.00"), [D("0.00"), D("0.00")]),
        ([], D("0.00"), []),
    ],
)  # fmt: skip
def test_apportion_table(amounts: list[Decimal], total: Decimal, expected: list[Decimal]) -> None:
    assert apportion_cents(amounts, total) == expected


def test_half_cents_round_up_away_from_zero() -> None:
    assert to_cents(D("0.125")) == D("0.13")
    assert to_cents(D("-0.125")) == D("-0.13")
    assert to_cents(D("0.124999")) == D("0.12")


def test_nothing_to_share_a_total_among_is_an_error() -> None:
    with pytest.raises(ValueError, match="no amounts"):
        apportion_cents([], D("0.01"))


_AMOUNTS = st.lists(
    st.decimals(min_value=-1000, max_value=10_000, places=7, allow_nan=False), max_size=12
)


@given(_AMOUNTS)
def test_parts_add_up_to_the_rounded_sum_and_stay_within_a_cent(amounts: list[Decimal]) -> None:
    total = to_cents(sum(amounts, D(0)))
    parts = apportion_cents(amounts, total) if amounts else []
    assert sum(parts, D(0)) == total
    assert all(part == part.quantize(D("0.01")) for part in parts)
    assert all(abs(part - amount) < D("0.01") for part, amount in zip(parts, amounts, strict=True))


@given(_AMOUNTS.filter(bool), st.integers(-300, 300))
def test_any_target_is_met_exactly(amounts: list[Decimal], cents_off: int) -> None:
    total = to_cents(sum(amounts, D(0))) + D(cents_off) / 100
    assert sum(apportion_cents(amounts, total), D(0)) == total
