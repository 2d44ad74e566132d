"""Token timing of a stream: the first token arrival gives the TTFT from the request's arrival,
each later one a gap; a stream's mean gap is what its usage record keeps."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.token_timing import TokenTiming


@pytest.mark.parametrize(
    ("arrived_s", "reads_s", "observed", "ttft_s", "mean_itl_s"),
    [
        (10.0, [], [], None, None),
        (10.0, [10.25], [0.25], 0.25, None),
        (10.0, [10.5, 10.6, 10.8], [0.5, 0.1, 0.2], 0.5, 0.15),
        (10.0, [9.0, 9.5], [0.0, 0.5], 0.0, 0.5),  # a clock that stepped back: never negative
        (10.0, [11.0, 10.5, 11.5], [1.0, 0.0, 1.0], 1.0, 0.5),
    ],
)
def test_observations_of_known_reads(
    arrived_s: float,
    reads_s: list[float],
    observed: list[float],
    ttft_s: float | None,
    mean_itl_s: float | None,
) -> None:
    timing = TokenTiming(arrived_s)
    assert [timing.tokens_at(at) for at in reads_s] == pytest.approx(observed)
    assert timing.ttft_s == (pytest.approx(ttft_s) if ttft_s is not None else None)
    assert timing.mean_itl_s == (pytest.approx(mean_itl_s) if mean_itl_s is not None else None)
    assert timing.gaps == max(0, len(reads_s) - 1)


@given(
    st.floats(0, 1e6),
    st.lists(st.floats(0, 100), min_size=2, max_size=50),
)
def test_the_gaps_add_up_to_the_time_from_first_to_last_token(
    arrived_s: float, steps_s: list[float]
) -> None:
    timing = TokenTiming(arrived_s)
    at = arrived_s
    gaps = []
    for step in steps_s:
        at += step
        gaps.append(timing.tokens_at(at))
    assert gaps[0] == pytest.approx(steps_s[0], abs=1e-6)
    assert sum(gaps[1:]) == pytest.approx(at - arrived_s - steps_s[0], abs=1e-6)
    assert timing.mean_itl_s == pytest.approx(sum(steps_s[1:]) / (len(steps_s) - 1), abs=1e-6)
