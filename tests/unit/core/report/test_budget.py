"""Budget thresholds fire once each, when spend reaches them; the month-end projection from the
recent run rate, on synthetic spend histories of steady tenants (mid-month starters included)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.meter import MeterWindow, month_of, month_window
from gpuplex.core.report.budget import (
    RUN_RATE_WINDOW_S,
    budget_crossings,
    projected_spend,
    run_rate_window,
)
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


def test_projection_follows_the_run_rate_of_the_last_day() -> None:
    march = month_window("2025-03")
    at = datetime(2025, 3, 11, tzinfo=UTC)
    recent = run_rate_window(march, at, march.start)
    assert recent == MeterWindow(datetime(2025, 3, 10, tzinfo=UTC), at)
    # 100 so far, 24 of it in the last day: 1/h for the 21 days left
    assert projected_spend(D(100), D(24), recent, march) == D(100 + 21 * 24)


def test_projection_of_a_tenant_that_started_mid_month() -> None:
    """The issue's case: $2.38 spent at $11.70/h since the 20th 23:48 is not $2.89 by month end."""
    march = month_window("2025-03")
    first = datetime(2025, 3, 20, 23, 48, tzinfo=UTC)
    at = datetime(2025, 3, 21, 0, 0, 12, tzinfo=UTC)
    recent = run_rate_window(march, at, first)
    assert recent == MeterWindow(first, at)
    projected = projected_spend(D("2.38"), D("2.38"), recent, march)
    assert projected > D(2800)  # 2.38 per 12 min 12 s, for 11 days


def test_no_spend_no_window_and_no_projection_beyond_the_spend() -> None:
    march = month_window("2025-03")
    assert run_rate_window(march, datetime(2025, 3, 5, tzinfo=UTC), None) is None
    assert run_rate_window(march, march.start, march.start) is None
    assert projected_spend(D(7), D(0), None, march) == D("7.00")
    # a tenant that stopped: nothing in the last day, so the month ends where it is
    recent = run_rate_window(march, datetime(2025, 3, 15, tzinfo=UTC), march.start)
    assert projected_spend(D(50), D(0), recent, march) == D("50.00")
    # after the month: nothing left to add
    late = run_rate_window(march, datetime(2025, 5, 1, tzinfo=UTC), march.start)
    assert projected_spend(D(100), D(10), late, march) == D("100.00")


HOUR_S = 3600


@settings(max_examples=200, deadline=None)
@given(
    rate_cents_per_h=st.integers(min_value=1, max_value=1_000_000),
    start_h=st.integers(min_value=0, max_value=31 * 24 - 2),
    observed_h=st.integers(min_value=1, max_value=31 * 24),
    noise_percent=st.lists(st.integers(min_value=-2, max_value=2), min_size=31, max_size=31),
)
def test_steady_tenants_are_projected_within_5_percent_of_the_true_month_end(
    rate_cents_per_h: int, start_h: int, observed_h: int, noise_percent: list[int]
) -> None:
    """A synthetic history: a tenant that starts at hour `start_h` of March (mid-month, often)
    and spends a steady rate per hour, each day up to 2 % off it (any way round: all high, then
    all low is the worst case), observed `observed_h` hours after it started. Its true month end
    is what the whole history adds up to."""
    march = month_window("2025-03")
    hours = 31 * 24
    rate = D(rate_cents_per_h) / 100
    hourly = [
        rate * (100 + noise_percent[h // 24]) / 100 if h >= start_h else D(0) for h in range(hours)
    ]
    now_h = min(start_h + observed_h, hours)
    at = march.start + timedelta(hours=now_h)
    first = march.start + timedelta(hours=start_h)
    spend = sum(hourly[:now_h], D(0))
    recent = run_rate_window(march, at, first)
    assert recent is not None
    recent_h = int((recent.end - recent.start).total_seconds()) // HOUR_S
    recent_spend = sum(hourly[now_h - recent_h : now_h], D(0))
    projected = projected_spend(spend, recent_spend, recent, march)
    true_end = sum(hourly, D(0))
    assert abs(projected - true_end) <= true_end * D("0.05") + D("0.01")


@given(
    spend=st.decimals(min_value=0, max_value=10_000, places=2),
    first_h=st.integers(min_value=0, max_value=700),
    at_h=st.integers(min_value=0, max_value=800),
)
def test_the_run_rate_window_is_at_most_a_day_and_never_before_the_first_spend(
    spend: Decimal, first_h: int, at_h: int
) -> None:
    march = month_window("2025-03")
    first = march.start + timedelta(hours=first_h)
    at = march.start + timedelta(hours=at_h)
    recent = run_rate_window(march, at, first)
    if recent is None:
        assert min(at, march.end) <= first
        return
    assert first <= recent.start < recent.end <= min(at, march.end)
    assert recent.end - recent.start <= timedelta(seconds=RUN_RATE_WINDOW_S)
    assert projected_spend(spend, spend, recent, march) >= spend


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
