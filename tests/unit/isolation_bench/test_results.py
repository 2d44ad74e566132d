"""The numbers of `gpuplex bench isolation`: percentiles, throughput, aggregate against exclusive,
interference."""

from __future__ import annotations

import pytest

from gpuplex.isolation_bench.results import (
    TenantRun,
    interference,
    percentile,
    scenario_result,
    summarize,
    versus_exclusive,
)
from gpuplex.isolation_bench.scenarios import (
    HEAVY,
    STEADY,
    Scenario,
    SharingPattern,
    TenantLoad,
)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([1.0, 2.0, 3.0, 4.0], 75, 3.0),
        ([float(k) for k in range(1, 101)], 99, 99.0),
        ([float(k) for k in range(1, 101)], 100, 100.0),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.0),  # order does not matter
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def run(
    tenant: str, batch: int, latency_s: float, steps: int, start: float = 0.0, window_s: float = 2.0
) -> TenantRun:
    return TenantRun(tenant, batch, None, (latency_s,) * steps, window_s, start, 0.0)


def test_throughput_counts_samples_over_the_measured_window() -> None:
    result = summarize(run("t1", 32, 0.01, 200, window_s=2.0))
    assert result.samples_per_s == pytest.approx(200 * 32 / 2.0)
    assert result.p50_ms == pytest.approx(10.0)
    assert result.steps == 200


def test_a_tenant_that_measured_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="t1 measured no step"):
        summarize(run("t1", 1, 0.01, 0))


def _scenario(name: str, pattern: SharingPattern, *loads: TenantLoad) -> Scenario:
    return Scenario(name, pattern, loads)


def test_aggregate_is_divided_by_exclusive_at_the_same_batch() -> None:
    alone = scenario_result(
        _scenario("exclusive-b8", SharingPattern.EXCLUSIVE, TenantLoad("t1", 8)),
        [run("t1", 8, 0.01, 100)],
    )
    shared = scenario_result(
        _scenario(
            "mps-equal-b8", SharingPattern.MPS, TenantLoad("t1", 8, 50), TenantLoad("t2", 8, 50)
        ),
        [run("t1", 8, 0.02, 60), run("t2", 8, 0.02, 70)],
    )
    other_batch = scenario_result(
        _scenario(
            "timeslice-b1", SharingPattern.TIMESLICE, TenantLoad("t1", 1), TenantLoad("t2", 1)
        ),
        [run("t1", 1, 0.01, 10), run("t2", 1, 0.01, 10)],
    )
    results = [alone, shared, other_batch]
    assert versus_exclusive(shared, results) == pytest.approx(130 / 100)
    assert versus_exclusive(alone, results) == pytest.approx(1.0)
    assert versus_exclusive(other_batch, results) is None  # no exclusive run at batch 1


def test_overlap_is_the_window_every_tenant_measured_at_once() -> None:
    scenario = _scenario(
        "timeslice-b1", SharingPattern.TIMESLICE, TenantLoad("t1", 1), TenantLoad("t2", 1)
    )
    result = scenario_result(
        scenario,
        [run("t1", 1, 0.01, 10, start=100.0, window_s=5.0), run("t2", 1, 0.01, 10, start=103.0)],
    )
    assert result.overlap_s == pytest.approx(2.0)  # t2 measured 103..105, t1 100..105


def test_interference_compares_the_steady_p99_with_its_p99_alone() -> None:
    alone = scenario_result(
        _scenario("exclusive-b1", SharingPattern.EXCLUSIVE, TenantLoad("t1", 1)),
        [TenantRun("t1", 1, None, (0.001,) * 99 + (0.002,), 1.0, 0.0, 0.0)],
    )
    crowded = scenario_result(
        _scenario(
            "steady+heavy-mps",
            SharingPattern.MPS,
            TenantLoad(STEADY, 1, 50),
            TenantLoad(HEAVY, 64, 50),
        ),
        [
            TenantRun(STEADY, 1, 50, (0.001,) * 90 + (0.006,) * 10, 1.0, 0.0, 0.0),
            run(HEAVY, 64, 0.1, 10, window_s=1.0),
        ],
    )
    [found] = interference([alone, crowded])
    assert found.alone_p99_ms == pytest.approx(1.0)
    assert found.crowded_p99_ms == pytest.approx(6.0)
    assert found.ratio == pytest.approx(6.0)
    assert found.heavy_samples_per_s == pytest.approx(640.0)


def test_no_interference_without_an_exclusive_baseline() -> None:
    crowded = scenario_result(
        _scenario(
            "steady+heavy-mps",
            SharingPattern.MPS,
            TenantLoad(STEADY, 1, 50),
            TenantLoad(HEAVY, 64, 50),
        ),
        [run(STEADY, 1, 0.001, 10), run(HEAVY, 64, 0.1, 10)],
    )
    assert interference([crowded]) == []
