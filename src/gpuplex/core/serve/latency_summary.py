"""A tenant's latency per model, summed up from its usage records for the dashboard: how long its
requests waited in the fair queue, their time to first token and their inter-token latency, as the
50th and 95th percentiles over requests (nearest rank).

Only requests that reached the fair queue count (the others have no latency of their own, and name
models a client made up). TTFT and ITL come from streamed replies only: a record's ITL is its
stream's mean gap between token arrivals (token_timing.py), so the percentiles here are over
requests, where `gpuplex_gateway_inter_token_latency_seconds` counts every gap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LatencySample:
    """One request's latency, as its usage record has it."""

    model: str
    queue_wait_s: float | None
    ttft_s: float | None
    itl_s: float | None


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50_s: float
    p95_s: float
    count: int


@dataclass(frozen=True, slots=True)
class ModelLatency:
    model: str
    requests: int  # requests that reached the fair queue
    queue_wait: Percentiles | None
    time_to_first_token: Percentiles | None  # streamed requests that got a token
    inter_token_latency: Percentiles | None  # streamed requests that got two token arrivals


def nearest_rank(sorted_values: Sequence[float], fraction: float) -> float:
    """The value at `fraction` (0 < fraction <= 1) of sorted, non-empty `sorted_values`."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def percentiles(values: list[float]) -> Percentiles | None:
    if not values:
        return None
    values.sort()
    return Percentiles(nearest_rank(values, 0.5), nearest_rank(values, 0.95), len(values))


def latency_by_model(samples: Iterable[LatencySample]) -> list[ModelLatency]:
    """Per model (by name), the percentiles of the samples that have any latency at all."""
    waits: dict[str, list[float]] = {}
    ttfts: dict[str, list[float]] = {}
    itls: dict[str, list[float]] = {}
    requests: dict[str, int] = {}
    for sample in samples:
        if sample.queue_wait_s is None and sample.ttft_s is None:
            continue
        model = sample.model
        requests[model] = requests.get(model, 0) + 1
        for value, into in (
            (sample.queue_wait_s, waits),
            (sample.ttft_s, ttfts),
            (sample.itl_s, itls),
        ):
            if value is not None:
                into.setdefault(model, []).append(value)
    return [
        ModelLatency(
            model=model,
            requests=requests[model],
            queue_wait=percentiles(waits.get(model, [])),
            time_to_first_token=percentiles(ttfts.get(model, [])),
            inter_token_latency=percentiles(itls.get(model, [])),
        )
        for model in sorted(requests)
    ]
