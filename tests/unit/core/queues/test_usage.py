"""Decayed usage: the closed form per interval halves per half-life, adds up over split intervals,
only grows with what is held and shrinks with age, and the step-by-step form an event loop keeps
equals it."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import example, given, strategies as st

from gpuplex.core.queues.usage import (
    UsageInterval,
    decayed_seconds,
    decayed_since,
    decayed_usage,
    usage_horizon_s,
    usage_level,
)

times = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
lengths = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)
half_lives = st.floats(min_value=1.0, max_value=1e7, allow_nan=False)


# Slack for the floats: the times here reach 3e6 s, whose rounding (5e-10 s) shifts a decay over a
# half-life of 1 s by about that much, relatively; and subnormal results keep only a few bits.
SLACK = 1e-9
TINY = 1e-300


def by_hand(start: float, end: float, now: float, half_life: float) -> float:
    """The integral of 2^-(now - t)/H over [start, min(end, now)), by the midpoint rule."""
    end = min(end, now)
    if end <= start:
        return 0.0
    steps = 20_000
    width = (end - start) / steps
    return math.fsum(
        math.pow(2.0, -(now - (start + (i + 0.5) * width)) / half_life) * width
        for i in range(steps)
    )


@pytest.mark.parametrize(
    ("start", "end", "now", "half_life"),
    [(0.0, 3600.0, 3600.0, 3600.0), (-86_400.0, -3600.0, 0.0, 86_400.0), (0.0, 10.0, 50.0, 7.0)],
)
def test_the_closed_form_is_the_integral(
    start: float, end: float, now: float, half_life: float
) -> None:
    assert decayed_seconds(start, end, now, half_life) == pytest.approx(
        by_hand(start, end, now, half_life), rel=1e-6
    )


@given(start=times, length=lengths, age=lengths, half_life=half_lives)
def test_it_halves_per_half_life(start: float, length: float, age: float, half_life: float) -> None:
    end = start + length
    now = end + age
    later = decayed_seconds(start, end, now + half_life, half_life)
    assert later == pytest.approx(decayed_seconds(start, end, now, half_life) / 2, rel=1e-9)


@given(start=times, first=lengths, second=lengths, age=lengths, half_life=half_lives)
def test_it_adds_up_over_split_intervals(
    start: float, first: float, second: float, age: float, half_life: float
) -> None:
    cut, end = start + first, start + first + second
    now = end + age
    whole = decayed_seconds(start, end, now, half_life)
    parts = decayed_seconds(start, cut, now, half_life) + decayed_seconds(cut, end, now, half_life)
    assert parts == pytest.approx(whole, rel=1e-9, abs=1e-9)


@given(start=times, length=lengths, more=lengths, age=lengths, later=lengths, half_life=half_lives)
@example(start=0.0, length=40.0, more=31693.0, age=1035.00001, later=0.0, half_life=1.0)
def test_it_grows_with_what_is_held_and_shrinks_with_age(
    start: float, length: float, more: float, age: float, later: float, half_life: float
) -> None:
    end = start + length
    now = end + age
    value = decayed_seconds(start, end, now, half_life)
    assert 0.0 <= value <= (end - start) * (1 + SLACK) + TINY  # the span as floats hold it
    assert decayed_seconds(start - more, end, now, half_life) >= value * (1 - SLACK) - TINY
    assert decayed_seconds(start, end + more, now + more, half_life) >= value * (1 - SLACK) - TINY
    assert decayed_seconds(start, end, now + later, half_life) <= value * (1 + SLACK) + TINY


def test_what_lies_after_now_does_not_count_yet_and_an_open_interval_runs_until_now() -> None:
    assert decayed_seconds(10.0, 20.0, 5.0, 60.0) == 0.0
    assert decayed_seconds(0.0, None, 30.0, 60.0) == decayed_seconds(0.0, 30.0, 30.0, 60.0)
    assert decayed_seconds(0.0, 100.0, 30.0, 60.0) == decayed_seconds(0.0, 30.0, 30.0, 60.0)


def test_a_half_life_of_zero_remembers_nothing() -> None:
    assert decayed_seconds(0.0, 100.0, 100.0, 0.0) == 0.0
    assert decayed_since({"a": {"gpus": 5.0}}, {"a": {"gpus": 1.0}}, 10.0, 0.0) == {}
    assert usage_level(1000.0, 0.0) == 0.0
    assert usage_horizon_s(0.0) == 0.0


def test_held_for_ever_it_is_the_amount_held_on_average() -> None:
    half_life = 3600.0
    forever = decayed_usage([UsageInterval("a", {"gpus": 4.0}, -1e9)], 0.0, half_life)
    assert usage_level(forever["a"]["gpus"], half_life) == pytest.approx(4.0)
    assert forever["a"]["gpus"] == pytest.approx(4.0 * half_life / math.log(2))


@st.composite
def timelines(draw: st.DrawFn) -> tuple[list[float], list[dict[str, float]]]:
    """Instants and, between consecutive ones, how many GPUs two tenants held."""
    gaps = draw(st.lists(st.floats(min_value=0.0, max_value=5000.0), min_size=1, max_size=12))
    times = [0.0]
    for gap in gaps:
        times.append(times[-1] + gap)
    held = [
        {"a": float(draw(st.integers(0, 4))), "b": float(draw(st.integers(0, 4)))} for _ in gaps
    ]
    return times, held


@given(timeline=timelines(), half_life=half_lives)
def test_the_step_by_step_form_equals_the_closed_form(
    timeline: tuple[list[float], list[dict[str, float]]], half_life: float
) -> None:
    times, held = timeline
    usage: dict[str, dict[str, float]] = {}
    intervals = []
    for (start, end), amounts in zip(itertools.pairwise(times), held, strict=True):
        now = {t: {"gpus": v} for t, v in amounts.items()}
        usage = decayed_since(usage, now, end - start, half_life)
        intervals += [UsageInterval(t, {"gpus": v}, start, end) for t, v in amounts.items() if v]
    closed = decayed_usage(intervals, times[-1], half_life)
    for tenant in ("a", "b"):
        expected = closed.get(tenant, {}).get("gpus", 0.0)
        got = usage.get(tenant, {}).get("gpus", 0.0)
        assert got == pytest.approx(expected, rel=1e-9, abs=1e-6)
