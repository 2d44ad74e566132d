"""Budgets, pure: which alert thresholds a tenant's spend has newly crossed, and where the spend is
heading by the end of the period."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
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


def projected_spend(spend: Decimal, period: MeterWindow, at: datetime) -> Decimal:
    """Spend at the end of the period if it goes on at the rate so far (linear), in cents. Before
    the period or at its very start there is no rate yet: the spend itself."""
    at = require_utc(at, "projection time")
    elapsed = period.overlap_seconds(period.start, at)
    if elapsed == 0:
        return to_cents(spend)
    return to_cents(spend * period.seconds / elapsed)
