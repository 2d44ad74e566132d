"""The gateway under load, end to end: weighted fairness on tokens, a well-behaved tenant's latency
while another floods, rate-limit accuracy with one gateway and with two sharing Redis, and no lost
usage record when the gateway is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from functools import partial

import aiohttp
import httpx
import pytest
import redis

from gpuplex.core.serve.tokens import DEFAULT_OVERHEAD
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from tests.e2e.gateway.load import (
    Reply,
    call,
    chat_body,
    closed_loop,
    flood_statuses,
    open_loop,
    percentile,
)
from tests.e2e.gateway.stack import Stack, stack
from tests.services import redis_url_or_skip

__all__ = ["stack"]

pytestmark = [pytest.mark.slow, pytest.mark.lane]

SHARED_BASE = """
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 1}}]}}]
tenants:
  - name: base
    isolation: mps
    requirement: moderate
    workloads:
      - name: llm
        gpu: {{memory_gib: 40}}
        serve: {{model: llm, accepts_adapters: true, port: {port}}}
{tenants}
gateway:
  port: {{gateway_port}}
  max_in_flight_per_backend: {in_flight}
  max_waiting_per_tenant: {waiting}
  max_wait_s: 30
  limiter: {limiter}
"""

TENANT = """  - name: {name}
    isolation: mps
    requirement: moderate
    weight: {weight}
    rate_limits: {limits}
    workloads:
      - name: bot
        serve: {{model: bot, lora_of: base/llm}}
"""


def shared_base_spec(
    port: int,
    tenants: dict[str, tuple[int, str]],
    in_flight: int = 4,
    waiting: int = 64,
    limiter: str = "memory",
) -> str:
    listed = "".join(
        TENANT.format(name=name, weight=weight, limits=limits)
        for name, (weight, limits) in tenants.items()
    )
    return SHARED_BASE.format(
        port=port, tenants=listed, in_flight=in_flight, waiting=waiting, limiter=limiter
    )


def adapters(names: list[str]) -> list[str]:
    return [f"{name}/bot" for name in names]


def tokens_between(replies: list[Reply], start: float, end: float) -> dict[str, int]:
    served: dict[str, int] = {}
    for reply in replies:
        if reply.status == 200 and start <= reply.done_at_s < end:
            served[reply.tenant] = served.get(reply.tenant, 0) + reply.tokens
    return served


def _sized(max_tokens: int, _request: int) -> bytes:
    return chat_body("bot", max_tokens)


def jain_index(values: list[int]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


#: Clients per tenant in the fairness tests, and the stand-in's time per generated token. Shares
#: hold only while every tenant has requests waiting at the gateway; with 12 clients and 2 ms a
#: token (100 requests a second) the test's own client, sharing two cores with three other pytest
#: workers, fell behind reading replies, the heaviest tenant's queue ran dry and the lightest got
#: 0.159 of the tokens against 1/7 (twice in ten four-worker runs). At 4 ms (50 a second) with
#: 24 clients the heaviest tenant keeps about 0.7 s of work waiting.
FAIR_CLIENTS = 24
FAIR_DECODE_MS_PER_TOKEN = 4.0
#: How far a tenant's share may be from its weight's, relative. Even so, a fresh-clone run
#: (2026-12-02) drained the heaviest tenant's queue at moments: weights 1:2:4 got 0.150, 0.301 and
#: 0.549 against 0.143, 0.286 and 0.571 (5.4 % off at most), over a 5 % bound. A scheduler that
#: got the weights wrong is far outside 10 %: first come first served gives each a third (the
#: lightest 133 % over), weights off by one (2:3:5) give the lightest 40 % over.
FAIR_SHARE_REL = 0.10


async def backlogged(
    url: str, keys: dict[str, str], sizes: dict[str, int], duration_s: float
) -> list[Reply]:
    runs = [
        closed_loop(url, keys[t], t, FAIR_CLIENTS, duration_s, partial(_sized, sizes[t]))
        for t in keys
    ]
    return [reply for replies in await asyncio.gather(*runs) for reply in replies]


def test_equal_weights_share_token_throughput_fairly(stack: Stack) -> None:
    names = ["a", "b", "c"]
    port = stack.sim(["llm"], adapters(names), decode_ms_per_token=FAIR_DECODE_MS_PER_TOKEN)
    gateway = stack.gateway(shared_base_spec(port, {n: (1, "{}") for n in names}))
    keys = {n: stack.key(n) for n in names}
    started = time.monotonic()
    replies = asyncio.run(backlogged(gateway.url, keys, {"a": 8, "b": 30, "c": 60}, 12))
    served = tokens_between(replies, started + 2, started + 12)
    assert set(served) == set(names)
    assert jain_index(list(served.values())) >= 0.99, served


def test_weights_1_2_4_give_proportional_shares(stack: Stack) -> None:
    weights = {"a": 1, "b": 2, "c": 4}
    port = stack.sim(["llm"], adapters(list(weights)), decode_ms_per_token=FAIR_DECODE_MS_PER_TOKEN)
    gateway = stack.gateway(shared_base_spec(port, {n: (w, "{}") for n, w in weights.items()}))
    keys = {n: stack.key(n) for n in weights}
    started = time.monotonic()
    replies = asyncio.run(backlogged(gateway.url, keys, dict.fromkeys(weights, 20), 12))
    served = tokens_between(replies, started + 2, started + 12)
    total = sum(served.values())
    for name, weight in weights.items():
        assert served[name] / total == pytest.approx(weight / 7, rel=FAIR_SHARE_REL), served


def test_a_flooding_tenant_does_not_hurt_a_steady_one(stack: Stack) -> None:
    port = stack.sim(["llm"], adapters(["a", "b"]), decode_ms_per_token=10.0, contention=0.01)
    gateway = stack.gateway(
        shared_base_spec(port, {"a": (1, "{}"), "b": (1, "{}")}, in_flight=8, waiting=32)
    )
    key_a, key_b = stack.key("a"), stack.key("b")
    body = chat_body("bot", 100)
    alone = asyncio.run(open_loop(gateway.url, key_a, "a", 2.0, 10, body))
    capacity_per_s = 8 / 1.0  # 8 in flight, 100 tokens x 10 ms each
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        flood = pool.submit(flood_statuses, gateway.url, key_b, "b", 20 * capacity_per_s, 12, body)
        time.sleep(1)  # the flood is on
        crowded = asyncio.run(open_loop(gateway.url, key_a, "a", 2.0, 10, body))
        flooded = flood.result()
    assert all(r.status == 200 for r in alone + crowded), {r.status for r in crowded}
    assert flooded.count(429) > len(flooded) / 2
    p99_alone = percentile([r.latency_s for r in alone], 99)
    p99_crowded = percentile([r.latency_s for r in crowded], 99)
    assert p99_crowded <= 1.5 * p99_alone, (p99_alone, p99_crowded)


TOKENS_PER_MIN = 30_000
# Shorter than the limiter's 60 s window, so nothing admitted in a run slides out of it: every
# admitted token counts against the one limit. Each client stops at its first 429, so a run ends
# once the limit is reached. How the window slides is tested in test_limiter_redis.py.
RUN_CAP_S = 50
# What the gateway reserves for the smallest request (`chat_body("bot", 1)`): its 40 prompt bytes
# and the 4 of its role, the default template overheads (per message and per request) and 1
# completion token. The reservation is cut to what the server counted when the reply ends, so
# requests still in flight when the last client stops hand tokens back (about 150 each here) after
# every client has gone: one client then asks for the smallest request until refused, and what is
# left must be less than that request's reservation.
SMALLEST_RESERVATION = (
    40 + len("user") + DEFAULT_OVERHEAD.per_message + DEFAULT_OVERHEAD.per_request + 1
)


def _admitted_tokens(replies: list[Reply]) -> int:
    return sum(r.tokens for r in replies if r.status == 200)


#: How long a refused client waits before it asks once more. The gateway hands back the unused
#: part of a reservation after the reply has gone out (proxy.py settles in a `finally`, a Redis
#: round trip with the shared limiter), so a 429 that follows a reply at once may only mean that
#: hand-back is still on its way; on a loaded CI machine it was, once (29,777 of 30,000 admitted).
SETTLE_S = 1.0


async def _until_refused(url: str, key: str, tenant: str) -> list[Reply]:
    """One client, the smallest request after the last, until it is refused twice in a row:
    once, and again SETTLE_S later."""
    replies: list[Reply] = []
    refused_once = False
    async with aiohttp.ClientSession() as session:
        for _ in range(TOKENS_PER_MIN):
            reply = await call(session, url, key, tenant, chat_body("bot", 1))
            replies.append(reply)
            if reply.status != 429:
                refused_once = False
                continue
            if refused_once:
                return replies
            refused_once = True
            await asyncio.sleep(SETTLE_S)
    raise AssertionError(f"never refused after {len(replies)} requests")


def _varied(i: int) -> bytes:
    return chat_body("bot", 1 + (i * 7919) % 200)


def test_tokens_per_minute_hold_under_50_concurrent_clients(stack: Stack) -> None:
    port = stack.sim(["llm"], adapters(["a"]))
    limits = f"{{tokens_per_min: {TOKENS_PER_MIN}}}"
    gateway = stack.gateway(shared_base_spec(port, {"a": (1, limits)}, in_flight=64))
    key = stack.key("a")
    replies = asyncio.run(
        closed_loop(gateway.url, key, "a", 50, RUN_CAP_S, _varied, stop_on_429=True)
    )
    assert any(r.status == 429 for r in replies)
    concurrent = _admitted_tokens(replies)
    assert concurrent <= TOKENS_PER_MIN, concurrent
    admitted = _admitted_tokens(replies + asyncio.run(_until_refused(gateway.url, key, "a")))
    assert admitted <= TOKENS_PER_MIN, admitted
    assert admitted > TOKENS_PER_MIN - SMALLEST_RESERVATION, admitted


def test_two_gateways_sharing_redis_admit_one_limit(stack: Stack) -> None:
    redis_url = redis_url_or_skip()
    port = stack.sim(["llm"], adapters(["a"]))
    limits = f"{{tokens_per_min: {TOKENS_PER_MIN}}}"
    spec = shared_base_spec(port, {"a": (1, limits)}, in_flight=64, limiter="redis")
    client = redis.Redis.from_url(redis_url)
    for stale in client.scan_iter("gpuplex:rl:tenant:a:*"):  # an earlier run's window
        client.delete(stale)
    client.close()
    first = stack.gateway(spec, redis_url=redis_url, name="gw1")
    second = stack.gateway(spec, redis_url=redis_url, name="gw2")
    key = stack.key("a")

    async def both() -> list[Reply]:
        runs = [
            closed_loop(g.url, key, "a", 25, RUN_CAP_S, _varied, stop_on_429=True)
            for g in (first, second)
        ]
        return [r for replies in await asyncio.gather(*runs) for r in replies]

    replies = asyncio.run(both())
    concurrent = _admitted_tokens(replies)
    assert concurrent <= TOKENS_PER_MIN, concurrent
    admitted = _admitted_tokens(replies + asyncio.run(_until_refused(second.url, key, "a")))
    assert admitted <= TOKENS_PER_MIN, admitted
    assert admitted > TOKENS_PER_MIN - SMALLEST_RESERVATION, admitted


def test_kill_9_loses_no_usage_record_of_a_completed_request(stack: Stack) -> None:
    port = stack.sim(["llm"], adapters(["a"]), decode_ms_per_token=0.5)
    gateway = stack.gateway(shared_base_spec(port, {"a": (1, "{}")}, in_flight=32))
    key = stack.key("a")

    async def load_then_kill() -> list[Reply]:
        load = asyncio.create_task(
            closed_loop(gateway.url, key, "a", 20, 6, lambda _i: chat_body("bot", 10))
        )
        await asyncio.sleep(2.5)
        assert gateway.process is not None
        os.killpg(gateway.process.pid, signal.SIGKILL)
        return await load

    replies = asyncio.run(load_then_kill())
    gateway.process.wait(10)  # type: ignore[union-attr]
    completed = {r.request_id for r in replies if r.status == 200}
    assert len(completed) > 20
    gateway.start()  # the restarted gateway moves the dead one's spool into the store
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        stored = stack.usage().request_ids()
        if completed <= stored:
            break
        time.sleep(0.2)
    missing = completed - stack.usage().request_ids()
    assert not missing, f"{len(missing)} completed requests have no usage record"
    assert stack.usage().count("a") == len(stack.usage().request_ids())


REVOCATION_BOUND_S = 3.0


def test_revocation_reaches_every_worker_within_a_few_seconds(stack: Stack) -> None:
    redis_url = redis_url_or_skip()
    port = stack.sim(["llm"], adapters(["a"]))
    spec = shared_base_spec(port, {"a": (1, "{}")}, limiter="redis").replace(
        "  limiter: redis", "  limiter: redis\n  workers: 2\n  failed_auth_per_min: 100000"
    )
    gateway = stack.gateway(spec, redis_url=redis_url)
    key = stack.key("a")
    headers = {"authorization": f"Bearer {key}"}

    def statuses(n: int) -> set[int]:  # fresh connections, spread over the workers
        return {
            httpx.get(f"{gateway.url}/v1/models", headers=headers).status_code for _ in range(n)
        }

    loaded_by = time.monotonic() + 2
    while statuses(20) != {200}:  # every worker has loaded the new key
        assert time.monotonic() < loaded_by
    store = open_store(stack.store_url)
    KeyRepository(store).revoke(key.split("_")[1], datetime.now(UTC), "test")
    revoked_at = time.monotonic()  # committed: from here the workers' polling is what counts
    store.dispose()
    # The promise is about when the key stops being accepted, so what is timed is when the last
    # accepted request was sent, not how long the probing took (each probe is a new connection,
    # slow on a loaded machine). Probing ends after 20 refusals in a row, spread over the workers.
    last_accepted_at, refused_in_a_row = revoked_at, 0
    while refused_in_a_row < 20:
        assert time.monotonic() - revoked_at < 10, "the revoked key is still accepted after 10 s"
        sent_at = time.monotonic()
        (answer,) = statuses(1)
        assert answer in (200, 401)
        if answer == 200:
            last_accepted_at, refused_in_a_row = sent_at, 0
        else:
            refused_in_a_row += 1
    # Workers poll the store every second; on a loaded machine a poll can come late, so the
    # bound here is generous (the 1 s figure is what an idle machine shows, not a test's target).
    assert last_accepted_at - revoked_at <= REVOCATION_BOUND_S
    assert statuses(40) == {401}
    assert gateway.process is not None
    group = subprocess.run(  # noqa: S603
        ["pgrep", "-g", str(gateway.process.pid)],  # noqa: S607 - procps
        capture_output=True,
        text=True,
        check=True,
    )
    assert len(group.stdout.split()) >= 3  # the supervisor and its two workers
    metrics = gateway.metrics()  # summed over both workers
    assert 'gpuplex_gateway_rejections_total{reason="invalid_api_key",tenant="unknown"}' in metrics
