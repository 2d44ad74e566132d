"""Measured metering: step-wise integration of GPU samples, capped by max_gap_s, clipped."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import (
    BUSY_GPU_SECONDS,
    MEMORY_MIB_SECONDS,
    GpuSample,
    MeterLine,
    MeterWindow,
    measured_lines,
)
from gpuplex.errors import MeterInputError
from tests.unit.core.meter.plans import T0

WINDOW = MeterWindow(T0, T0 + timedelta(hours=1))


def sample(
    at_s: float,
    memory_mib: int = 1000,
    utilization: float | None = 50.0,
    *,
    tenant: str = "a",
    replica: int = 0,
    gpu_index: int = 0,
    model: str | None = "H100-80GB",
) -> GpuSample:
    return GpuSample(
        tenant=tenant,
        workload="w",
        replica=replica,
        node="n0",
        gpu_index=gpu_index,
        at=T0 + timedelta(seconds=at_s),
        memory_used_mib=memory_mib,
        utilization_percent=utilization,
        gpu_model=model,
        source="sim",
    )


def _by_metric(lines: list[MeterLine]) -> dict[tuple[str, str, str], Decimal]:
    return {(line.tenant, line.metric, line.dimension): line.quantity for line in lines}


@pytest.mark.parametrize(
    ("samples", "memory_mib_seconds", "busy_gpu_seconds"),
    [
        # each sample holds until the next; the last for max_gap_s (60)
        ([sample(0), sample(10, 2000, 100.0)], 10 * 1000 + 60 * 2000, Decimal(5 + 60)),
        # a gap longer than max_gap_s counts only max_gap_s
        ([sample(0), sample(500)], 60 * 1000 + 60 * 1000, Decimal(30 + 30)),
        # before the window: only the part that reaches in counts
        ([sample(-30)], 30 * 1000, Decimal(15)),
        # at the end of the window: clipped
        ([sample(3590)], 10 * 1000, Decimal(5)),
        # unknown utilization adds no busy time
        ([sample(0, utilization=None)], 60 * 1000, None),
        # utilization as reported, not rounded: 33.3 %
        ([sample(0, utilization=33.3)], 60 * 1000, Decimal("19.98")),
    ],
)
def test_samples_hold_until_the_next_for_at_most_max_gap(
    samples: list[GpuSample], memory_mib_seconds: int, busy_gpu_seconds: Decimal | None
) -> None:
    got = _by_metric(measured_lines(samples, WINDOW, max_gap_s=60))
    assert got[("a", MEMORY_MIB_SECONDS, "H100-80GB")] == memory_mib_seconds
    assert got.get(("a", BUSY_GPU_SECONDS, "H100-80GB")) == busy_gpu_seconds


def test_series_are_per_replica_and_gpu_and_the_dimension_is_the_model() -> None:
    samples = [
        sample(0, tenant="a", replica=0),
        sample(30, tenant="a", replica=1),  # another replica: does not cut replica 0 short
        sample(0, tenant="a", gpu_index=1, model=None),
        sample(0, tenant="b"),
    ]
    got = _by_metric(measured_lines(samples, WINDOW, max_gap_s=60))
    assert got == {
        ("a", MEMORY_MIB_SECONDS, "H100-80GB"): Decimal(120_000),
        ("a", BUSY_GPU_SECONDS, "H100-80GB"): Decimal(60),
        ("a", MEMORY_MIB_SECONDS, ""): Decimal(60_000),
        ("a", BUSY_GPU_SECONDS, ""): Decimal(30),
        ("b", MEMORY_MIB_SECONDS, "H100-80GB"): Decimal(60_000),
        ("b", BUSY_GPU_SECONDS, "H100-80GB"): Decimal(30),
    }


def test_no_samples_meter_nothing_and_bad_samples_are_refused() -> None:
    assert measured_lines([], WINDOW) == []
    with pytest.raises(MeterInputError, match="utilization"):
        sample(0, utilization=101.0)
    with pytest.raises(MeterInputError, match="negative"):
        sample(0, memory_mib=-1)
    with pytest.raises(MeterInputError, match="unknown sample source 'guess'"):
        replace(sample(0), source="guess")  # type: ignore[arg-type]
    with pytest.raises(MeterInputError, match="no timezone"):
        replace(sample(0), at=T0.replace(tzinfo=None))
    with pytest.raises(MeterInputError, match="max_gap_s"):
        measured_lines([sample(0)], WINDOW, max_gap_s=0)


_SAMPLES = st.lists(
    st.builds(
        sample,
        at_s=st.integers(-120, 3700).map(float),
        memory_mib=st.integers(0, 80_000),
        utilization=st.none() | st.floats(0, 100, allow_nan=False),
        replica=st.integers(0, 2),
        tenant=st.sampled_from(["a", "b"]),
    ),
    max_size=25,
)


def _totals(lines: list[MeterLine]) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for line in lines:
        out[line.tenant, line.metric, line.dimension] += line.quantity  # type: ignore[assignment]
    return out


@given(_SAMPLES, st.integers(1, 3599), st.integers(1, 300))
def test_adjacent_windows_add_up_and_order_does_not_matter(
    samples: list[GpuSample], split_s: int, max_gap_s: int
) -> None:
    split = T0 + timedelta(seconds=split_s)
    left = measured_lines(samples, MeterWindow(T0, split), max_gap_s=max_gap_s)
    right = measured_lines(samples, MeterWindow(split, WINDOW.end), max_gap_s=max_gap_s)
    union = measured_lines(samples, WINDOW, max_gap_s=max_gap_s)
    assert _totals(left + right) == _totals(union)
    assert measured_lines(list(reversed(samples)), WINDOW, max_gap_s=max_gap_s) == union
    assert union == sorted(union)
    # no replica is billed for more than the window's length per GPU
    memory_cap = 80_000 * 3600 * 3
    assert all(line.quantity <= memory_cap for line in union if line.metric == MEMORY_MIB_SECONDS)
