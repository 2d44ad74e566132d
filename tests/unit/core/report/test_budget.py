"""Budget thresholds fire once each, when spend reaches them; month-end projection."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import month_of, month_window
from gpuplex.core.report import budget_crossings, projected_spend
from gpuplex.errors import MeterInputError

D = Decimal


@pytest.mark.parametrize(
    ("spend", "budget", "fired", "expected"),
    [
        (D("49.99"), D(100), set(), []),
        (D("50.00"), D(100), set(), [50]),
        (D("85"), D(100), set(), [50, 80]),
        (D("85"), D(100), {50}, [80]),
        (D("120"), D(100), {50, 80}, [100]),
        (D("120"), D(100), {50, 80, 100}, []),
        (D("0"), D(0), set(), []),  # no spend, no alert, even on a zero budget
        (D("0.01"), D(0), set(), [50, 80, 100]),
    ],
)
def test_crossings(spend: Decimal, budget: Decimal, fired: set[int], expected: list[int]) -> None:
    assert budget_crossings(spend, budget, [100, 50, 80], fired) == expected


def test_negative_budget_is_refused() -> None:
    with pytest.raises(MeterInputError, match="negative"):
        budget_crossings(D(1), D(-1), [50], set())


@given(
    st.lists(st.decimals(min_value=0, max_value=500, places=2), max_size=10),
    st.decimals(min_value=1, max_value=1000, places=2),
)
def test_each_threshold_fires_once_as_spend_grows(steps: list[Decimal], budget: Decimal) -> None:
    fired: set[int] = set()
    spend = D(0)
    for step in steps:
        spend += step
        new = budget_crossings(spend, budget, [50, 80, 100], fired)
        assert not set(new) & fired
        fired |= set(new)
        assert fired == {t for t in (50, 80, 100) if spend * 100 >= budget * t and spend > 0}


def test_projection_is_linear_over_the_month() -> None:
    march = month_window("2025-03")
    assert projected_spend(D(100), march, datetime(2025, 3, 11, tzinfo=UTC)) == D("310.00")
    assert projected_spend(D(100), march, march.start) == D("100.00")
    assert projected_spend(D(100), march, datetime(2025, 5, 1, tzinfo=UTC)) == D("100.00")


@pytest.mark.parametrize(
    ("period", "start", "end"),
    [
        ("2025-03", datetime(2025, 3, 1, tzinfo=UTC), datetime(2025, 4, 1, tzinfo=UTC)),
        ("2024-12", datetime(2024, 12, 1, tzinfo=UTC), datetime(2025, 1, 1, tzinfo=UTC)),
    ],
)
def test_month_windows(period: str, start: datetime, end: datetime) -> None:
    window = month_window(period)
    assert (window.start, window.end) == (start, end)
    assert month_of(start) == period


@pytest.mark.parametrize("period", ["2025-3", "2025-13", "march", "2025-00"])
def test_bad_periods_are_refused(period: str) -> None:
    with pytest.raises(MeterInputError):
        month_window(period)
