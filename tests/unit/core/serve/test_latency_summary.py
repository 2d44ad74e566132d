"""A tenant's latency per model for the dashboard: nearest-rank percentiles over requests, only of
requests that reached the fair queue, TTFT and ITL only where a stream had them."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.latency_summary import (
    LatencySample,
    Percentiles,
    latency_by_model,
    nearest_rank,
)


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([1.0], 0.5, 1.0),
        ([1.0], 0.95, 1.0),
        ([1.0, 2.0], 0.5, 1.0),
        ([1.0, 2.0], 0.95, 2.0),
        ([float(n) for n in range(1, 101)], 0.5, 50.0),
        ([float(n) for n in range(1, 101)], 0.95, 95.0),
        ([float(n) for n in range(1, 21)], 0.95, 19.0),
    ],
)
def test_nearest_rank(values: list[float], fraction: float, expected: float) -> None:
    assert nearest_rank(values, fraction) == expected


def test_per_model_with_streams_and_whole_replies() -> None:
    samples = [
        LatencySample("chat", 0.01, 0.2, 0.02),
        LatencySample("chat", 0.03, 0.4, None),  # one token: no gap
        LatencySample("chat", 0.02, None, None),  # a whole reply
        LatencySample("embed", 0.0, None, None),
        LatencySample("made-up", None, None, None),  # refused before the queue
    ]
    by_model = {m.model: m for m in latency_by_model(samples)}
    assert set(by_model) == {"chat", "embed"}
    chat = by_model["chat"]
    assert chat.requests == 3
    assert chat.queue_wait == Percentiles(0.02, 0.03, 3)
    assert chat.time_to_first_token == Percentiles(0.2, 0.4, 2)
    assert chat.inter_token_latency == Percentiles(0.02, 0.02, 1)
    assert by_model["embed"].time_to_first_token is None
    assert by_model["embed"].inter_token_latency is None


@given(st.lists(st.floats(0, 1000), min_size=1, max_size=200))
def test_percentiles_are_values_seen_and_ordered(values: list[float]) -> None:
    (summary,) = latency_by_model(LatencySample("m", v, v, v) for v in values)
    for got in (summary.queue_wait, summary.time_to_first_token, summary.inter_token_latency):
        assert got is not None
        assert got.p50_s in values
        assert got.p95_s in values
        assert got.p50_s <= got.p95_s
        assert got.count == len(values)
