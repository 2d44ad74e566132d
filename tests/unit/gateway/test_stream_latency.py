"""The relay times a stream's token arrivals: a fake model server's stream with known read times
(an injected clock) gives the TTFT and inter-token gaps it should, in the histograms labelled with
the tenant and the model it called (the gaps added as the stream ends, however it ends), and in
what the usage record keeps. Reads without tokens (the role-only opening event, usage, `[DONE]`)
are not arrivals; events that come in one read count once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
import orjson
import pytest
from hypothesis import given, strategies as st
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from gpuplex.core.serve.inference import Endpoint, InferenceRequest
from gpuplex.core.serve.stream_usage import StreamUsage
from gpuplex.core.serve.token_timing import TokenTiming
from gpuplex.gateway.auth import Caller
from gpuplex.gateway.relay import Exchange, relay_stream
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.observe.gateway_metrics import (
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    exposition as metrics_text,
    observe_counted,
)
from tests.clocks import ManualClock

ARRIVED_S = 1_000.0
_tenants = itertools.count()


def content(text: str) -> bytes:
    return (
        b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"\n\n"
    )


ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}\n\n'
DONE = b"data: [DONE]\n\n"


@dataclass
class FakeContent:
    """A model server's body, read as `(read at, bytes)` pieces: the clock moves to each piece's
    time as the gateway reads it. `breaks`: the server breaks off after the last piece."""

    pieces: list[tuple[float, bytes]]
    clock: ManualClock
    breaks: bool = False

    async def _reads(self) -> AsyncIterator[bytes]:
        for at_s, piece in self.pieces:
            self.clock.reading_s = at_s
            await asyncio.sleep(0)
            yield piece
        if self.breaks:
            raise aiohttp.ClientPayloadError("connection reset")

    def iter_any(self) -> AsyncIterator[bytes]:
        return self._reads()


@dataclass
class FakeReply:
    content: FakeContent


@dataclass
class FakeConfig:
    max_event_kib: int = 64


@dataclass
class FakeRuntime:
    config: FakeConfig = field(default_factory=FakeConfig)


def exchange(tenant: str, model: str = "chat") -> Exchange:
    caller = Caller(tenant, "gpx_0000", frozenset(), None, ())
    request = InferenceRequest(Endpoint.CHAT, model, True, 5, 16)
    return Exchange("req-1", ARRIVED_S, cast(Any, None), caller, request, "upstream-chat")


def relay(
    pieces: list[tuple[float, bytes]], ex: Exchange, breaks: bool = False
) -> tuple[list[bytes], list[Exchange]]:
    clock = ManualClock(ARRIVED_S)
    sent: list[bytes] = []
    recorded: list[Exchange] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            sent.append(message["body"])

    def record(_rt: GatewayRuntime, seen: Exchange) -> bool:
        recorded.append(seen)
        seen.recorded = True
        return True

    reply = cast(aiohttp.ClientResponse, FakeReply(FakeContent(pieces, clock, breaks)))
    runtime = cast(GatewayRuntime, FakeRuntime())
    asyncio.run(relay_stream(runtime, ex, reply, send, record, clock))
    return sent, recorded


def sample(name: str, tenant: str, model: str = "chat", **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"tenant": tenant, "model": model, **labels})


def test_a_stream_with_known_read_times_gives_its_ttft_and_gaps() -> None:
    tenant = f"timed{next(_tenants)}"
    pieces = [
        (1_000.3, ROLE),  # no tokens: not an arrival
        (1_000.5, content("Hel")),  # first token: TTFT 0.5 from the request's arrival
        (1_000.5625, content("lo") + content(",")),  # two events, one read: one gap, 0.0625
        (1_000.875, content(" wor")[:10]),  # half an event: nothing arrived yet
        (1_001.0, content(" wor")[10:]),  # the rest: an arrival, gap 0.4375
        (1_001.2, USAGE + DONE),  # no tokens
    ]
    ex = exchange(tenant)
    sent, recorded = relay(pieces, ex)

    ttft = "gpuplex_gateway_time_to_first_token_seconds"
    itl = "gpuplex_gateway_inter_token_latency_seconds"
    assert sample(f"{ttft}_count", tenant) == 1
    assert sample(f"{ttft}_sum", tenant) == pytest.approx(0.5)
    assert sample(f"{ttft}_bucket", tenant, le="0.25") == 0
    assert sample(f"{ttft}_bucket", tenant, le="0.5") == 1
    assert sample(f"{itl}_count", tenant) == 2
    assert sample(f"{itl}_sum", tenant) == pytest.approx(0.5)
    assert sample(f"{itl}_bucket", tenant, le="0.05") == 0
    assert sample(f"{itl}_bucket", tenant, le="0.075") == 1
    assert sample(f"{itl}_bucket", tenant, le="0.4") == 1
    assert sample(f"{itl}_bucket", tenant, le="0.5") == 2
    # the record, written as [DONE] goes out, has every arrival timed
    assert recorded
    assert recorded[0] is ex
    assert ex.timing is not None
    assert ex.timing.ttft_s == pytest.approx(0.5)
    assert ex.timing.mean_itl_s == pytest.approx(0.25)
    assert b"".join(sent).endswith(DONE)


def test_a_stream_with_one_token_has_a_ttft_and_no_gap() -> None:
    tenant = f"timed{next(_tenants)}"
    ex = exchange(tenant, model="small")
    relay([(1_002.0, ROLE + content("Hi") + DONE)], ex)
    ttft = "gpuplex_gateway_time_to_first_token_seconds"
    assert sample(f"{ttft}_count", tenant, "small") == 1
    assert sample(f"{ttft}_sum", tenant, "small") == pytest.approx(2.0)
    assert sample("gpuplex_gateway_inter_token_latency_seconds_count", tenant, "small") in (0, None)
    assert ex.timing is not None
    assert ex.timing.mean_itl_s is None


def test_a_stream_the_server_breaks_off_has_its_gaps_so_far_observed() -> None:
    tenant = f"timed{next(_tenants)}"
    ex = exchange(tenant)
    pieces = [(1_000.25, content("a")), (1_000.5, content("b")), (1_001.5, content("c"))]
    sent, _ = relay(pieces, ex, breaks=True)
    assert b"backend_unavailable" in sent[-1]
    itl = "gpuplex_gateway_inter_token_latency_seconds"
    assert sample(f"{itl}_count", tenant) == 2
    assert sample(f"{itl}_sum", tenant) == pytest.approx(1.25)
    assert sample(f"{itl}_bucket", tenant, le="0.2") == 0
    assert sample(f"{itl}_bucket", tenant, le="0.3") == 1
    assert sample(f"{itl}_bucket", tenant, le="1.0") == 2


def test_a_stream_without_tokens_observes_nothing() -> None:
    tenant = f"timed{next(_tenants)}"
    ex = exchange(tenant)
    relay([(1_000.1, ROLE), (1_000.2, USAGE + DONE)], ex)
    assert sample("gpuplex_gateway_time_to_first_token_seconds_count", tenant) in (0, None)
    assert ex.timing is not None
    assert ex.timing.ttft_s is None


@pytest.mark.parametrize(
    ("delta", "arrival"),
    [
        ({"content": "x"}, True),
        ({"reasoning_content": "thinking"}, True),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, True),
        ({"role": "assistant", "content": ""}, False),
        ({}, False),
    ],
)
def test_what_counts_as_tokens(delta: dict[str, Any], arrival: bool) -> None:
    usage = StreamUsage()
    event = b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": delta}]}) + b"\n\n"
    usage.read_event(event)
    assert usage.token_events == int(arrival)


def test_buckets_are_sorted_and_in_the_exposition() -> None:
    assert list(TTFT_BUCKETS_S) == sorted(TTFT_BUCKETS_S)
    assert list(ITL_BUCKETS_S) == sorted(ITL_BUCKETS_S)
    text = metrics_text().decode()
    assert "# TYPE gpuplex_gateway_time_to_first_token_seconds histogram" in text
    assert "# TYPE gpuplex_gateway_inter_token_latency_seconds histogram" in text


@given(st.lists(st.floats(0, 200, allow_nan=False), max_size=60))
def test_gaps_counted_per_stream_add_up_as_observing_each_would(gaps_s: list[float]) -> None:
    registry = CollectorRegistry()
    each = Histogram(
        "each_seconds", "observed one by one", buckets=ITL_BUCKETS_S, registry=registry
    )
    counted = Histogram("counted_seconds", "counted", buckets=ITL_BUCKETS_S, registry=registry)
    timing = TokenTiming(0.0, ITL_BUCKETS_S)
    at = timing.tokens_at(0.0)
    for gap in gaps_s:
        at += gap
        each.observe(timing.tokens_at(at))
    observe_counted(counted, timing.gap_counts, timing.gaps_total_s)

    def samples(name: str) -> dict[tuple[str, str], float]:
        family = next(f for f in registry.collect() if f.name == name)
        return {
            (sample.name, sample.labels.get("le", "")): sample.value
            for sample in family.samples
            if not sample.name.endswith("_created")
        }

    got = {
        (name.replace("counted", "each"), le): v
        for (name, le), v in samples("counted_seconds").items()
    }
    expected = samples("each_seconds")
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
