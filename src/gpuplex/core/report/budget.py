"""Budgets, pure: which alert thresholds a tenant's spend has newly crossed, and where the spend is
heading by the end of the period (from the recent run rate, over a window it names)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from gpuplex.core.meter import MeterWindow
from gpuplex.core.meter.model import require_utc
from gpuplex.core.report.rounding import to_cents
from gpuplex.errors import MeterInputError

DEFAULT_THRESHOLDS_PERCENT = (50, 80, 100)


def budget_crossings(
    spend: Decimal,
    budget: Decimal,
    thresholds_percent: Iterable[int],
    already_fired: set[int],
) -> list[int]:
    """The thresholds (percent of budget) that spend has reached and that have not fired yet,
    ascending. Spend reaches a threshold when spend >= budget x threshold / 100; zero spend reaches
    none, so a budget of 0 fires every threshold at the first cent."""
    if budget < 0:
        raise MeterInputError(f"budget {budget} is negative: give an amount of 0 or more")
    if spend <= 0:
        return []
    crossed = {
        threshold
        for threshold in thresholds_percent
        if threshold not in already_fired and spend * 100 >= budget * threshold
    }
    return sorted(crossed)


#: How far back the run rate a projection follows is measured: recent enough to follow a change of
#: pace within a day, long enough to smooth a day's peaks.
RUN_RATE_WINDOW_S = 86_400


def run_rate_window(
    period: MeterWindow, at: datetime, first_spend_at: datetime | None
) -> MeterWindow | None:
    """The window the run rate is measured over: the last RUN_RATE_WINDOW_S before `at` (or
    before the period's end, once it is over), or since the tenant's first spend in the period
    when that is shorter (a tenant that started mid-month). None when there is no such window yet
    (no spend, or `at` at or before it)."""
    at = require_utc(at, "projection time")
    if first_spend_at is None:
        return None
    end = min(at, period.end)
    start = max(
        period.start,
        require_utc(first_spend_at, "first spend time"),
        end - timedelta(seconds=RUN_RATE_WINDOW_S),
    )
    return MeterWindow(start, end) if end > start else None


def projected_spend(
    spend: Decimal, recent_spend: Decimal, recent: MeterWindow | None, period: MeterWindow
) -> Decimal:
    """Spend at the end of the period if it goes on at the recent run rate, in cents: the spend so
    far plus `recent_spend` / `recent`'s length for every second from `recent`'s end to the
    period's end. Without a recent window (no spend yet) the spend itself.

    Not spend x period / time since the period began: that makes a tenant that started mid-month
    look almost free, and one that stopped spending look as if it went on."""
    if recent_spend < 0 or spend < 0:
        raise MeterInputError(f"spend {spend} and recent spend {recent_spend} must be 0 or more")
    if recent is None:
        return to_cents(spend)
    remaining = period.overlap_seconds(recent.end, None)
    return to_cents(spend + recent_spend * remaining / recent.seconds)
