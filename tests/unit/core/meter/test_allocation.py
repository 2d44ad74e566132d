"""Allocation metering: GPU-seconds by compute share, instance-seconds, clipping, fleet capacity."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import (
    FLEET_TENANT,
    GPU_SECONDS,
    INSTANCE_SECONDS,
    MeterLine,
    MeterWindow,
    PlanInterval,
    allocation_dimension,
    allocation_lines,
    fleet_gpu_seconds,
    parse_allocation_dimension,
)
from gpuplex.core.plan import Mode, Placement
from gpuplex.errors import MeterInputError
from tests.unit.core.meter.plans import T0, hours, placement, plan

WINDOW = MeterWindow(hours(0), hours(10))
H10 = Decimal(36000)


def _metric(lines: list[MeterLine], metric: str) -> dict[tuple[str, str], Decimal]:
    return {(line.tenant, line.dimension): line.quantity for line in lines if line.metric == metric}


@pytest.mark.parametrize(
    ("placements", "gpu_seconds", "instance_seconds"),
    [
        pytest.param(
            [placement("a", Mode.DEDICATED, 100)],
            {("a", "H100-80GB/dedicated"): H10},
            {("a", "H100-80GB/dedicated"): H10},
            id="one-whole-gpu",
        ),
        pytest.param(
            [placement("a", Mode.DEDICATED, 200, gpus=(0, 1))],
            {("a", "H100-80GB/dedicated"): 2 * H10},
            {("a", "H100-80GB/dedicated"): H10},
            id="two-gpus-one-replica",
        ),
        pytest.param(
            [placement("b", Mode.MIG, 43, profile="3g.40gb")],
            {("b", "H100-80GB/mig:3g.40gb"): H10 * Decimal("0.43")},
            {("b", "H100-80GB/mig:3g.40gb"): H10},
            id="mig-slice",
        ),
        pytest.param(
            [placement("c", Mode.MPS, 20, replica=r) for r in range(3)],
            {("c", "H100-80GB/mps"): 3 * H10 * Decimal("0.2")},
            {("c", "H100-80GB/mps"): 3 * H10},
            id="mps-shares-add-up",
        ),
        pytest.param(
            [placement("d", Mode.TIMESLICE, 0), placement("e", Mode.TIMESLICE, 0)],
            {("d", "H100-80GB/timeslice"): H10 / 2, ("e", "H100-80GB/timeslice"): H10 / 2},
            {("d", "H100-80GB/timeslice"): H10, ("e", "H100-80GB/timeslice"): H10},
            id="timeslice-unnamed-split-equally",
        ),
        pytest.param(
            [placement("d", Mode.TIMESLICE, 30), placement("e", Mode.TIMESLICE, 0)],
            {
                ("d", "H100-80GB/timeslice"): H10 * Decimal("0.3"),
                ("e", "H100-80GB/timeslice"): H10 * Decimal("0.7"),
            },
            {("d", "H100-80GB/timeslice"): H10, ("e", "H100-80GB/timeslice"): H10},
            id="timeslice-unnamed-gets-the-rest",
        ),
        pytest.param(
            [placement(t, Mode.TIMESLICE, 0) for t in "def"],
            {(t, "H100-80GB/timeslice"): H10 * Decimal("0.33") for t in "def"},
            {(t, "H100-80GB/timeslice"): H10 for t in "def"},
            id="timeslice-three-unnamed-whole-percent-each",
        ),
    ],
)
def test_gpu_seconds_follow_the_compute_share(
    placements: list[Placement],
    gpu_seconds: dict[tuple[str, str], Decimal],
    instance_seconds: dict[tuple[str, str], Decimal],
) -> None:
    lines = allocation_lines([PlanInterval(plan(*placements), hours(0), None)], WINDOW)
    assert _metric(lines, GPU_SECONDS) == gpu_seconds
    assert _metric(lines, INSTANCE_SECONDS) == instance_seconds
    assert all(line.source == "allocation" for line in lines)


@pytest.mark.parametrize(
    ("start", "end", "seconds"),
    [
        (-5, None, H10),  # began before the window, still in force
        (-5, 4, Decimal(4 * 3600)),  # ended inside the window
        (3, 4.5, Decimal(5400)),  # wholly inside
        (10, None, Decimal(0)),  # starts when the window ends
        (-3, 0, Decimal(0)),  # ended when the window starts
    ],
)
def test_intervals_are_clipped_to_the_window(
    start: float, end: float | None, seconds: Decimal
) -> None:
    interval = PlanInterval(
        plan(placement("a", Mode.DEDICATED, 100)), hours(start), None if end is None else hours(end)
    )
    lines = allocation_lines([interval], WINDOW)
    assert _metric(lines, INSTANCE_SECONDS).get(("a", "H100-80GB/dedicated"), Decimal(0)) == seconds


def test_revisions_in_sequence_each_count_their_own_placements() -> None:
    first = PlanInterval(plan(placement("a", Mode.DEDICATED, 100)), hours(0), hours(4))
    second = PlanInterval(plan(placement("b", Mode.MIG, 43, profile="3g.40gb")), hours(4), None)
    lines = allocation_lines([second, first], WINDOW)
    assert _metric(lines, INSTANCE_SECONDS) == {
        ("a", "H100-80GB/dedicated"): Decimal(4 * 3600),
        ("b", "H100-80GB/mig:3g.40gb"): Decimal(6 * 3600),
    }
    fleet = fleet_gpu_seconds([first, second], WINDOW)
    assert fleet == [
        MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", "H100-80GB", 2 * H10)
    ]


def test_overlapping_revisions_are_refused_rather_than_billed_twice() -> None:
    one = PlanInterval(plan(placement("a", Mode.DEDICATED, 100)), hours(0), hours(5))
    two = PlanInterval(plan(placement("a", Mode.DEDICATED, 100)), hours(4), None)
    with pytest.raises(MeterInputError, match="overlap"):
        allocation_lines([one, two], WINDOW)
    with pytest.raises(MeterInputError, match="overlap"):
        fleet_gpu_seconds([two, PlanInterval(plan(), hours(6), None)], WINDOW)


def test_naive_times_and_backward_windows_are_refused() -> None:
    with pytest.raises(MeterInputError, match="no timezone"):
        MeterWindow(hours(0).replace(tzinfo=None), hours(1))
    with pytest.raises(MeterInputError, match="at or before"):
        MeterWindow(hours(1), hours(1))
    with pytest.raises(MeterInputError, match="before it starts"):
        PlanInterval(plan(), hours(2), hours(1))


def test_no_intervals_and_empty_plans_meter_nothing() -> None:
    assert allocation_lines([], WINDOW) == []
    assert fleet_gpu_seconds([], WINDOW) == []
    assert allocation_lines([PlanInterval(plan(gpu_count=0), hours(0))], WINDOW) == []


@pytest.mark.parametrize(
    ("model", "mode", "profile", "text"),
    [
        ("H100-80GB", Mode.DEDICATED, None, "H100-80GB/dedicated"),
        ("H100-80GB", Mode.MIG, "3g.40gb", "H100-80GB/mig:3g.40gb"),
        ("A100-40GB", Mode.MPS, None, "A100-40GB/mps"),
        ("L40S", Mode.TIMESLICE, None, "L40S/timeslice"),
    ],
)
def test_dimensions_read_back(model: str, mode: Mode, profile: str | None, text: str) -> None:
    assert allocation_dimension(model, mode, profile) == text
    assert parse_allocation_dimension(text) == (model, mode, profile)


@pytest.mark.parametrize("text", ["H100-80GB", "H100-80GB/mig", "/dedicated", "H100/dedicated:x"])
def test_malformed_dimensions_are_refused(text: str) -> None:
    with pytest.raises(MeterInputError):
        parse_allocation_dimension(text)


_PLACEMENTS = st.sampled_from(
    [
        placement("a", Mode.DEDICATED, 100),
        placement("a", Mode.DEDICATED, 200, gpus=(0, 1)),
        placement("b", Mode.MIG, 43, profile="3g.40gb"),
        placement("c", Mode.MPS, 25),
        placement("d", Mode.TIMESLICE, 0),
    ]
)


@st.composite
def _revisions(draw: st.DrawFn) -> list[PlanInterval]:
    cuts = sorted(set(draw(st.lists(st.integers(-7200, 50_000), min_size=1, max_size=5))))
    intervals = []
    for index, cut in enumerate(cuts):
        until = cuts[index + 1] if index + 1 < len(cuts) else draw(st.none() | st.just(60_000))
        placements = draw(st.lists(_PLACEMENTS, max_size=4))
        for r, p in enumerate(placements):
            placements[r] = p.model_copy(update={"replica": r})
        intervals.append(
            PlanInterval(
                plan(*placements),
                T0 + timedelta(seconds=cut),
                None if until is None else T0 + timedelta(seconds=until),
            )
        )
    return intervals


def _totals(lines: list[MeterLine]) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for line in lines:
        out[line.tenant, line.metric, line.dimension] += line.quantity  # type: ignore[assignment]
    return out


@given(_revisions(), st.integers(1, 36_000), st.integers(1, 10**6))
def test_adjacent_windows_add_up_to_their_union(
    intervals: list[PlanInterval], split_s: int, micro: int
) -> None:
    split = T0 + timedelta(seconds=split_s, microseconds=micro)
    end = T0 + timedelta(hours=11)
    for meter in (allocation_lines, fleet_gpu_seconds):
        left = meter(intervals, MeterWindow(T0, split))
        right = meter(intervals, MeterWindow(split, end))
        union = meter(intervals, MeterWindow(T0, end))
        assert _totals(left + right) == _totals(union)
        assert union == sorted(union)
        assert meter(list(reversed(intervals)), MeterWindow(T0, end)) == union
