"""Job metering: each run's seconds inside the window, times its GPU share, per tenant and
dimension; runs outside count nothing, open runs count until the window's end, and splitting a
period into windows loses and adds nothing."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import (
    GPU_SECONDS,
    INSTANCE_SECONDS,
    JobRunInterval,
    JobUsage,
    MeterLine,
    MeterWindow,
    PlanInterval,
    allocation_lines,
    job_allocation_lines,
    job_usage,
    placement_gpu_share,
    summed_lines,
)
from gpuplex.core.plan import Mode
from gpuplex.errors import MeterInputError
from tests.unit.core.meter.plans import T0, hours, placement, plan

WINDOW = MeterWindow(hours(0), hours(10))


def run(
    job_id: str,
    start: datetime,
    end: datetime | None,
    *,
    tenant: str = "acme",
    mode: Mode = Mode.DEDICATED,
    percent: int = 100,
    profile: str | None = None,
    share: Decimal | None = None,
) -> JobRunInterval:
    placed = placement(tenant, mode, percent, profile=profile, workload=f"job-{job_id}")
    gpus = placement_gpu_share(placed) if share is None else share
    return JobRunInterval.of_placement(job_id, tenant, placed, gpus, start, end)


def test_a_run_inside_the_window_counts_its_seconds_times_its_share() -> None:
    runs = [
        run("j1", hours(1), hours(3)),
        run("j2", hours(2), hours(4), mode=Mode.MIG, percent=43, profile="3g.40gb"),
        run("j3", hours(0), hours(1), tenant="globex", mode=Mode.MPS, percent=25),
    ]
    assert job_usage(runs, WINDOW) == [
        JobUsage("acme", "j1", "H100-80GB/dedicated", Decimal(7200), Decimal(7200)),
        JobUsage(
            "acme", "j2", "H100-80GB/mig:3g.40gb", Decimal(7200) * Decimal("0.43"), Decimal(7200)
        ),
        JobUsage("globex", "j3", "H100-80GB/mps", Decimal(900), Decimal(3600)),
    ]


def test_lines_use_the_replicas_dimensions_and_add_to_them() -> None:
    replica = plan(placement("acme", Mode.DEDICATED, 100))
    replicas = allocation_lines([PlanInterval(replica, hours(0), hours(10))], WINDOW)
    jobs = job_allocation_lines([run("j1", hours(1), hours(3)), run("j2", hours(2), None)], WINDOW)
    assert jobs == [
        MeterLine("acme", "allocation", GPU_SECONDS, "H100-80GB/dedicated", Decimal(36000)),
        MeterLine("acme", "allocation", INSTANCE_SECONDS, "H100-80GB/dedicated", Decimal(36000)),
    ]
    both = summed_lines(replicas + jobs)
    assert [(line.metric, line.quantity) for line in both] == [
        (GPU_SECONDS, Decimal(72000)),
        (INSTANCE_SECONDS, Decimal(72000)),
    ]


def test_a_run_outside_the_window_or_ending_at_its_start_counts_nothing() -> None:
    runs = [
        run("before", hours(-5), hours(0)),
        run("after", hours(10), None),
        run("later", hours(11), hours(12)),
    ]
    assert job_usage(runs, WINDOW) == []
    assert job_allocation_lines(runs, WINDOW) == []


def test_an_open_run_counts_until_the_end_of_the_window() -> None:
    [usage] = job_usage([run("j1", hours(-2), None, percent=50)], WINDOW)
    assert (usage.instance_seconds, usage.gpu_seconds) == (Decimal(36000), Decimal(18000))


def test_runs_of_one_job_add_up_per_dimension() -> None:
    runs = [run("j1", hours(0), hours(1)), run("j1", hours(2), hours(3))]
    runs.append(run("j1", hours(4), hours(5), mode=Mode.MPS, percent=50))
    assert [(u.dimension, u.gpu_seconds) for u in job_usage(runs, WINDOW)] == [
        ("H100-80GB/dedicated", Decimal(7200)),
        ("H100-80GB/mps", Decimal(1800)),
    ]


def test_a_given_share_is_used_as_it_is() -> None:
    third = Decimal(1) / 3
    [usage] = job_usage([run("j1", hours(0), hours(3), mode=Mode.TIMESLICE, share=third)], WINDOW)
    assert usage.gpu_seconds == Decimal(10800) * third


@pytest.mark.parametrize(
    ("start", "end", "share", "message"),
    [
        pytest.param(hours(2), hours(1), Decimal(1), "ends", id="ends-before-it-starts"),
        pytest.param(hours(0), None, Decimal(-1), "share", id="negative-share"),
        pytest.param(hours(0), None, Decimal("NaN"), "share", id="not-a-number"),
        pytest.param(hours(0).replace(tzinfo=None), None, Decimal(1), "timezone", id="naive"),
    ],
)
def test_a_run_that_makes_no_sense_is_refused(
    start: datetime, end: datetime | None, share: Decimal, message: str
) -> None:
    with pytest.raises(MeterInputError, match=message):
        JobRunInterval("j1", "acme", "H100-80GB/dedicated", share, start, end)


_SECONDS = st.integers(-3600, 40_000)


@st.composite
def _runs(draw: st.DrawFn) -> list[JobRunInterval]:
    made = []
    for index in range(draw(st.integers(0, 6))):
        start = draw(_SECONDS)
        length = draw(st.one_of(st.none(), st.integers(0, 20_000)))
        percent = draw(st.sampled_from([10, 25, 43, 50, 100, 200]))
        made.append(
            run(
                f"j{index % 3}",
                T0 + timedelta(seconds=start),
                None if length is None else T0 + timedelta(seconds=start + length),
                tenant=draw(st.sampled_from(["acme", "globex"])),
                mode=Mode.MPS if percent < 100 else Mode.DEDICATED,
                percent=percent,
            )
        )
    return made


def _total(lines: list[MeterLine]) -> dict[tuple[str, str, str], Decimal]:
    totals: dict[tuple[str, str, str], Decimal] = {}
    for line in lines:
        key = (line.tenant, line.metric, line.dimension)
        totals[key] = totals.get(key, Decimal(0)) + line.quantity
    return totals


@given(_runs(), st.integers(1, 36_000), st.integers(1, 10**6))
def test_splitting_a_period_into_windows_loses_and_adds_nothing(
    runs: list[JobRunInterval], period_s: int, cut: int
) -> None:
    period = MeterWindow(T0, T0 + timedelta(seconds=period_s))
    middle = T0 + timedelta(microseconds=cut % (period_s * 10**6 - 1) + 1)
    whole = job_allocation_lines(runs, period)
    parts = job_allocation_lines(runs, MeterWindow(T0, middle)) + job_allocation_lines(
        runs, MeterWindow(middle, period.end)
    )
    assert summed_lines(parts) == whole
    assert _total(parts) == _total(whole)
    # and per job: each job's usage splits the same way
    halves = job_usage(runs, MeterWindow(T0, middle)) + job_usage(
        runs, MeterWindow(middle, period.end)
    )
    assert _per_job(halves) == _per_job(job_usage(runs, period))


def _per_job(usages: list[JobUsage]) -> dict[tuple[str, str], tuple[Decimal, Decimal]]:
    sums: dict[tuple[str, str], tuple[Decimal, Decimal]] = {}
    for usage in usages:
        gpu, instance = sums.get((usage.job_id, usage.dimension), (Decimal(0), Decimal(0)))
        sums[usage.job_id, usage.dimension] = (
            gpu + usage.gpu_seconds,
            instance + usage.instance_seconds,
        )
    return sums


@given(_runs(), st.integers(1, 36_000))
def test_runs_outside_the_window_count_zero_and_open_runs_count_to_its_end(
    runs: list[JobRunInterval], window_s: int
) -> None:
    window = MeterWindow(T0, T0 + timedelta(seconds=window_s))
    for one in runs:
        [*usage] = job_usage([one], window)
        inside_end = window.end if one.ended_at is None else min(one.ended_at, window.end)
        inside_start = max(one.started_at, window.start)
        if inside_end <= inside_start:
            assert usage == []
            continue
        seconds = Decimal((inside_end - inside_start) // timedelta(microseconds=1)) / 10**6
        assert [(u.instance_seconds, u.gpu_seconds) for u in usage] == [
            (seconds, seconds * one.gpu_share)
        ]
