"""The simulated model server's latency model: prefill, decode and the slowdown of sharing."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.sim.model_latency import LatencyModel, slowdown


@pytest.mark.parametrize(
    ("in_flight", "contention", "expected"),
    [
        (1, 0.0, 1.0),
        (1, 0.5, 1.0),  # alone: never slowed down
        (0, 0.5, 1.0),  # nothing running (a probe between requests)
        (2, 0.5, 1.5),
        (5, 0.25, 2.0),
        (11, 0.1, 2.0),
        (64, 0.0, 1.0),
    ],
)
def test_slowdown(in_flight: int, contention: float, expected: float) -> None:
    assert slowdown(in_flight, contention) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("model", "prompt_tokens", "in_flight", "first_s", "next_s"),
    [
        (LatencyModel(), 100, 1, 0.0, 0.0),
        (LatencyModel(prefill_s_per_token=0.001), 100, 1, 0.1, 0.0),
        (LatencyModel(prefill_s_per_token=0.001), 0, 1, 0.0, 0.0),
        (LatencyModel(decode_s_per_token=0.01), 100, 1, 0.0, 0.01),
        (LatencyModel(0.001, 0.01, contention=0.5), 100, 1, 0.1, 0.01),
        (LatencyModel(0.001, 0.01, contention=0.5), 100, 3, 0.2, 0.02),
        (LatencyModel(0.002, 0.005, contention=0.1), 50, 6, 0.15, 0.0075),
    ],
)
def test_first_and_next_token_times(
    model: LatencyModel, prompt_tokens: int, in_flight: int, first_s: float, next_s: float
) -> None:
    assert model.first_token_s(prompt_tokens, in_flight) == pytest.approx(first_s)
    assert model.next_token_s(in_flight) == pytest.approx(next_s)
    assert model.token_s(0, prompt_tokens, in_flight) == pytest.approx(first_s)
    assert model.token_s(1, prompt_tokens, in_flight) == pytest.approx(next_s)
    assert model.token_s(7, prompt_tokens, in_flight) == pytest.approx(next_s)


@pytest.mark.parametrize(
    ("model", "prompt_tokens", "completion_tokens", "in_flight", "expected_s"),
    [
        (LatencyModel(), 10, 10, 1, 0.0),
        (LatencyModel(decode_s_per_token=0.01), 10, 1, 1, 0.0),  # one token: prefill only
        (LatencyModel(decode_s_per_token=0.01), 10, 50, 1, 0.49),
        (LatencyModel(0.001, 0.01), 100, 11, 1, 0.2),
        (LatencyModel(0.001, 0.01, contention=1.0), 100, 11, 2, 0.4),
        (LatencyModel(prefill_s_per_token=0.001), 300, 0, 1, 0.3),  # an embedding request
    ],
)
def test_request_time(
    model: LatencyModel,
    prompt_tokens: int,
    completion_tokens: int,
    in_flight: int,
    expected_s: float,
) -> None:
    assert model.request_s(prompt_tokens, completion_tokens, in_flight) == pytest.approx(expected_s)


@pytest.mark.parametrize(
    ("model", "instant"),
    [
        (LatencyModel(), True),
        (
            LatencyModel(contention=3.0),
            True,
        ),  # contention slows nothing down when nothing takes time
        (LatencyModel(prefill_s_per_token=1e-6), False),
        (LatencyModel(decode_s_per_token=1e-6), False),
    ],
)
def test_instant_means_no_token_takes_time(model: LatencyModel, instant: bool) -> None:
    assert model.instant is instant
    if instant:
        assert model.request_s(1000, 1000, 100) == 0.0


@given(
    prefill_s=st.floats(0, 0.1),
    decode_s=st.floats(0, 0.1),
    contention=st.floats(0, 2),
    prompt_tokens=st.integers(0, 10_000),
    completion_tokens=st.integers(1, 1000),
    in_flight=st.integers(1, 256),
)
def test_request_time_is_the_sum_of_token_times_and_grows_with_load(
    prefill_s: float,
    decode_s: float,
    contention: float,
    prompt_tokens: int,
    completion_tokens: int,
    in_flight: int,
) -> None:
    model = LatencyModel(prefill_s, decode_s, contention)
    total_s = model.request_s(prompt_tokens, completion_tokens, in_flight)
    tokens_s = sum(model.token_s(i, prompt_tokens, in_flight) for i in range(completion_tokens))
    assert total_s == pytest.approx(tokens_s, rel=1e-9, abs=1e-12)
    assert model.request_s(prompt_tokens, completion_tokens, in_flight + 1) >= total_s
    assert total_s >= model.request_s(prompt_tokens, completion_tokens, 1)
