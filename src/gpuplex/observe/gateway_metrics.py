"""The gateway's Prometheus metrics. Labels are bounded: `tenant` is a tenant of the spec (or
`unknown` before a key is checked), `status` an HTTP status the gateway itself sends, `reason` one
of the gateway's error codes. `model` is a label only of the token latency histograms, and only
once the request was routed: a model name the spec gives the tenant, never text a client made up.

With several worker processes the metrics live in prometheus-client's multiprocess directory and
`/metrics` on any worker reports the sum."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from gpuplex.settings import prometheus_multiproc_dir

UNKNOWN_TENANT = "unknown"

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
WAIT_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: vLLM's `vllm:time_to_first_token_seconds` buckets from 5 ms (a gateway adds about a millisecond,
#: so finer ones stay empty) to 160 s (the default upstream timeout is 300 s; past 160 s the
#: `+Inf` bucket is precise enough)
TTFT_BUCKETS_S = (
    0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160,
)  # fmt: skip
#: vLLM's `vllm:inter_token_latency_seconds` buckets, with 2.5 ms and 5 ms below them: small
#: models decode a token in under 10 ms on an H100
ITL_BUCKETS_S = (
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5,
    10, 20, 40, 80,
)  # fmt: skip

REQUESTS = Counter(
    "gpuplex_gateway_requests_total",
    "Requests answered, by tenant and HTTP status.",
    ["tenant", "status"],
)
TOKENS = Counter(
    "gpuplex_gateway_tokens_total",
    "Tokens served, by tenant and kind (prompt, completion).",
    ["tenant", "kind"],
)
REJECTIONS = Counter(
    "gpuplex_gateway_rejections_total",
    "Requests refused by the gateway, by tenant and reason.",
    ["tenant", "reason"],
)
QUEUE_DEPTH = Gauge(
    "gpuplex_gateway_queue_depth",
    "Requests waiting in the fair queue, by tenant.",
    ["tenant"],
    multiprocess_mode="livesum",
)
BACKEND_REPLICAS_UP = Gauge(
    "gpuplex_gateway_backend_replicas_up",
    "Replicas of a model server that pass the gateway's health checks, by backend.",
    ["backend"],
    multiprocess_mode="livemax",
)
QUEUE_WAIT = Histogram(
    "gpuplex_gateway_queue_wait_seconds",
    "Time spent waiting for a turn, by tenant.",
    ["tenant"],
    buckets=WAIT_BUCKETS_S,
)
LATENCY = Histogram(
    "gpuplex_gateway_request_duration_seconds",
    "From a request's arrival to the last byte of its answer, by tenant.",
    ["tenant"],
    buckets=LATENCY_BUCKETS_S,
)
TIME_TO_FIRST_TOKEN = Histogram(
    "gpuplex_gateway_time_to_first_token_seconds",
    "Streamed requests: from the request's arrival (queue wait included) to the first read from "
    "the model server that carries generated tokens, by tenant and model.",
    ["tenant", "model"],
    buckets=TTFT_BUCKETS_S,
)
INTER_TOKEN_LATENCY = Histogram(
    "gpuplex_gateway_inter_token_latency_seconds",
    "Streamed requests: the time between successive reads from the model server that carry "
    "generated tokens (one observation per gap, added as the stream ends), by tenant and model.",
    ["tenant", "model"],
    buckets=ITL_BUCKETS_S,
)


@dataclass(frozen=True, slots=True)
class TenantSeries:
    """One tenant's series of the metrics every request touches, looked up once: `labels()`
    validates and locks on each call, several times per request otherwise."""

    queue_depth: Gauge
    queue_wait: Histogram
    latency: Histogram
    prompt_tokens: Counter
    completion_tokens: Counter


@functools.lru_cache(maxsize=4096)  # tenants of the spec: far fewer
def tenant_series(tenant: str) -> TenantSeries:
    return TenantSeries(
        queue_depth=QUEUE_DEPTH.labels(tenant),
        queue_wait=QUEUE_WAIT.labels(tenant),
        latency=LATENCY.labels(tenant),
        prompt_tokens=TOKENS.labels(tenant, "prompt"),
        completion_tokens=TOKENS.labels(tenant, "completion"),
    )


@dataclass(frozen=True, slots=True)
class ModelSeries:
    """A tenant's token latency series for one of its models, looked up once."""

    time_to_first_token: Histogram
    inter_token_latency: Histogram


@functools.lru_cache(maxsize=4096)  # routed (tenant, model) pairs of the spec
def model_series(tenant: str, model: str) -> ModelSeries:
    return ModelSeries(
        time_to_first_token=TIME_TO_FIRST_TOKEN.labels(tenant, model),
        inter_token_latency=INTER_TOKEN_LATENCY.labels(tenant, model),
    )


def observe_counted(histogram: Histogram, counts: Sequence[int], total: float) -> None:
    """Add observations already counted into `histogram`'s buckets (`counts[i]` of them in bucket
    i, +Inf last; `total` their sum) at the cost of one observation per bucket hit, not one per
    value: what `histogram.observe` would have made of each (a unit test checks they agree)."""
    buckets = histogram._buckets
    if len(counts) != len(buckets):
        raise ValueError(f"{len(counts)} counts for a histogram of {len(buckets)} buckets")
    if not any(counts):
        return
    histogram._sum.inc(total)
    for bucket, count in zip(buckets, counts, strict=True):
        if count:
            bucket.inc(count)


@functools.lru_cache(maxsize=4096)
def requests_series(tenant: str, status: int) -> Counter:
    """`REQUESTS` of a tenant and status (statuses the gateway sends: a few dozen)."""
    return REQUESTS.labels(tenant, str(status))


def exposition() -> bytes:
    """The text format for `/metrics`: this process's metrics, or every worker's summed."""
    directory = prometheus_multiproc_dir()
    if directory is None:
        from prometheus_client import REGISTRY

        return generate_latest(REGISTRY)
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return generate_latest(registry)
