"""The Redis limiter against a real Redis: it decides as the pure rules of `core.serve.limits` do,
holds one limit across concurrent calls and across OS processes, settles, lets leases and windows
lapse, and turns an unreachable Redis into `LimiterUnavailable`.

Redis is $GPUPLEX_TEST_REDIS_URL, else 127.0.0.1:6379/0; where it is unreachable these tests skip
with the reason, unless GPUPLEX_REQUIRE_SERVICES=1, where they fail. Each test uses a key prefix of
its own and deletes its keys afterwards."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings, strategies as st
from redis.asyncio import Redis

from gpuplex.core.serve import limits as pure
from gpuplex.core.serve.limits import (
    CONCURRENCY_RETRY_S,
    Admitted,
    Decision,
    Limit,
    LimiterState,
    LimitKind,
    Refused,
)
from gpuplex.errors import ErrorCode, LimiterUnavailable
from gpuplex.gateway import limiter_redis
from gpuplex.gateway.limiter_redis import RedisLimiter, limit_keys, redacted_url
from gpuplex.ids import random_hex
from tests.services import redis_url_or_skip

pytestmark = pytest.mark.lane

REPO_ROOT = Path(__file__).resolve().parents[3]
REQUESTS, TOKENS, CONCURRENT = LimitKind.REQUESTS, LimitKind.TOKENS, LimitKind.CONCURRENT


def new_prefix() -> str:
    return f"gpuplex:test:{random_hex(12)}:"


def delete_keys(url: str, prefix: str) -> None:
    with redis.Redis.from_url(url) as client:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.fixture(scope="module")
def url() -> str:
    return redis_url_or_skip()


@pytest.fixture
def prefix(url: str) -> Iterator[str]:
    key_prefix = new_prefix()
    yield key_prefix
    delete_keys(url, key_prefix)


async def redis_now_s(client: Redis) -> float:
    """Redis TIME as the script computes it (the same float arithmetic)."""
    seconds, microseconds = await client.time()
    return int(seconds) + int(microseconds) / 1_000_000


def summary(decision: Decision) -> tuple[bool, Limit | None, bool]:
    if isinstance(decision, Admitted):
        return (True, None, False)
    return (False, decision.limit, decision.never)


# --- (1) the same decisions as the pure rules ---------------------------------------------------

Op = tuple[str, list[int], int]  # ("admit", limit indices, tokens) | ("settle", [request], tokens)

ops_strategy = st.lists(
    st.one_of(
        st.tuples(
            st.just("admit"),
            st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
            st.integers(0, 450),
        ),
        st.tuples(
            st.just("settle"),
            st.lists(st.integers(0, 40), min_size=1, max_size=1),
            st.integers(0, 300),
        ),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=30, deadline=None)
@given(
    amounts=st.tuples(
        st.integers(1, 6),
        st.integers(1, 400),
        st.integers(50, 800),
        st.integers(0, 3),
        st.integers(1, 4),
    ),
    ops=ops_strategy,
)
def test_decides_as_the_pure_rules(
    url: str, amounts: tuple[int, int, int, int, int], ops: list[Op]
) -> None:
    limits = [
        Limit("key:k1", REQUESTS, amounts[0]),
        Limit("key:k1", TOKENS, amounts[1]),
        Limit("tenant:acme", TOKENS, amounts[2]),
        Limit("key:k1", CONCURRENT, amounts[3]),
        Limit("tenant:acme", CONCURRENT, amounts[4]),
    ]
    key_prefix = new_prefix()
    try:
        asyncio.run(_compare(url, key_prefix, limits, ops))
    finally:
        delete_keys(url, key_prefix)


async def _compare(url: str, key_prefix: str, limits: list[Limit], ops: list[Op]) -> None:
    limiter = RedisLimiter(url, key_prefix=key_prefix)
    probe = Redis.from_url(url)
    state = LimiterState()
    asked: list[tuple[str, list[Limit]]] = []  # every admission tried: request id, its limits
    try:
        for n, (op, which, tokens) in enumerate(ops):
            if op == "admit":
                request_id, chosen = f"r{n}", [limits[i] for i in which]
                asked.append((request_id, chosen))
                expected = pure.admit(state, chosen, request_id, tokens, await redis_now_s(probe))
                got = await limiter.admit(chosen, request_id, tokens)
                assert summary(got) == summary(expected), (n, ops)
                if isinstance(got, Refused) and isinstance(expected, Refused):
                    assert got.retry_after_s == pytest.approx(expected.retry_after_s, abs=0.1)
            elif asked:
                request_id, chosen = asked[which[0] % len(asked)]
                pure.settle(state, chosen, request_id, tokens)
                await limiter.settle(chosen, request_id, tokens)
        now = await redis_now_s(probe)
        for limit in limits:
            keys = limit_keys(key_prefix, limit)
            held = await probe.zcard(keys[0])
            if limit.kind is CONCURRENT:
                assert held == len(state.lease_set(limit).until_s)
            else:
                assert int(await probe.get(keys[2]) or 0) == state.used(limit, now)
                assert held == len(state.window(limit))
    finally:
        await probe.aclose()
        await limiter.close()


# --- (2) concurrent calls never admit more than the limit ---------------------------------------


def test_concurrent_admits_never_exceed_the_limit(url: str, prefix: str) -> None:
    tokens = Limit("tenant:acme", TOKENS, 1_000)
    slots = Limit("key:k1", CONCURRENT, 7)

    async def run() -> tuple[list[Decision], list[Decision]]:
        limiter = RedisLimiter(url, key_prefix=prefix)
        try:
            by_tokens = await asyncio.gather(
                *(limiter.admit([tokens], f"t{i}", 10) for i in range(200))
            )
            by_slots = await asyncio.gather(
                *(limiter.admit([slots], f"s{i}", 10) for i in range(200))
            )
            return list(by_tokens), list(by_slots)
        finally:
            await limiter.close()

    by_tokens, by_slots = asyncio.run(run())
    assert sum(isinstance(d, Admitted) for d in by_tokens) == 100
    assert {d.limit for d in by_tokens if isinstance(d, Refused)} == {tokens}
    assert sum(isinstance(d, Admitted) for d in by_slots) == 7
    assert all(d.retry_after_s == CONCURRENCY_RETRY_S for d in by_slots if isinstance(d, Refused))


# --- (3) two OS processes share one limit -------------------------------------------------------

SHARED_TOKENS_PER_MIN = 150_000
HAMMER_S = 3.0
CHILD = "import sys; from tests.integration.gateway.test_limiter_redis import child_main; child_main(sys.argv[1:])"


def child_main(argv: list[str]) -> None:
    """One gateway-like process: says `ready` once imported, reads the common start time from
    stdin, then 16 tasks admit random-sized requests from it for HAMMER_S seconds; prints what it
    got as JSON. (A start time fixed before the children exist fails on a loaded machine: a child
    still importing when the window ends admits nothing.)"""
    url, key_prefix, name = argv[0], argv[1], argv[2]
    print("ready", flush=True)  # noqa: T201
    start_at = float(sys.stdin.readline())
    print(json.dumps(asyncio.run(_hammer(url, key_prefix, name, start_at))))  # noqa: T201


async def _hammer(url: str, key_prefix: str, name: str, start_at: float) -> dict[str, int]:
    limiter = RedisLimiter(url, key_prefix=key_prefix)
    limits = [
        Limit("tenant:acme", TOKENS, SHARED_TOKENS_PER_MIN),
        Limit(f"key:{name}", REQUESTS, 10_000_000),
    ]
    got = {"admitted_tokens": 0, "admitted": 0, "refused": 0}
    rng = random.Random(name)

    async def worker(w: int) -> None:
        n = 0
        while time.time() < start_at + HAMMER_S:
            n += 1
            tokens = rng.randint(1, 100)
            if isinstance(await limiter.admit(limits, f"{name}-{w}-{n}", tokens), Admitted):
                got["admitted_tokens"] += tokens
                got["admitted"] += 1
            else:
                got["refused"] += 1

    await asyncio.sleep(max(0.0, start_at - time.time()))
    try:
        await asyncio.gather(*(worker(w) for w in range(16)))
    finally:
        await limiter.close()
    return got


@pytest.mark.slow
def test_two_processes_share_one_limit(url: str, prefix: str) -> None:
    children = [
        subprocess.Popen(  # noqa: S603 - our interpreter and this file's own code
            [sys.executable, "-c", CHILD, url, prefix, name],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for child in children:  # both imported and connected-to-be before the clock starts
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
    start_at = time.time() + 0.3
    for child in children:
        assert child.stdin is not None
        child.stdin.write(f"{start_at!r}\n")
        child.stdin.close()
    results = []
    for child in children:
        assert child.stdout is not None
        out = child.stdout.read()
        child.stdout.close()
        child.wait(timeout=60)
        assert child.returncode == 0
        results.append(json.loads(out))
    total = sum(r["admitted_tokens"] for r in results)
    assert all(r["admitted"] > 0 and r["refused"] > 0 for r in results), results
    assert SHARED_TOKENS_PER_MIN * 0.99 <= total <= SHARED_TOKENS_PER_MIN, results
    with redis.Redis.from_url(url) as client:
        sum_key = limit_keys(prefix, Limit("tenant:acme", TOKENS, SHARED_TOKENS_PER_MIN))[2]
        assert int(client.get(sum_key) or 0) == total


# --- (4) settle, (5) leases and windows lapse ---------------------------------------------------


def test_settle_gives_back_what_was_not_used(url: str, prefix: str) -> None:
    limits = [Limit("tenant:acme", TOKENS, 100), Limit("key:k1", CONCURRENT, 1)]

    async def run() -> list[Decision]:
        limiter = RedisLimiter(url, key_prefix=prefix)
        try:
            decisions = [await limiter.admit(limits, "r1", 100)]
            decisions.append(await limiter.admit(limits[:1], "r2", 1))
            await limiter.settle(limits, "r1", 10)
            decisions.append(await limiter.admit(limits, "r3", 90))
            decisions.append(await limiter.admit(limits[:1], "r4", 1))
            return decisions
        finally:
            await limiter.close()

    assert [summary(d) for d in asyncio.run(run())] == [
        (True, None, False),
        (False, limits[0], False),
        (True, None, False),  # also: settling r1 freed its concurrency slot
        (False, limits[0], False),
    ]


def test_leases_expire_and_keys_carry_ttls(url: str, prefix: str) -> None:
    limits = [Limit("key:k1", CONCURRENT, 1), Limit("key:k1", REQUESTS, 10)]

    async def run() -> tuple[list[Decision], list[int]]:
        limiter = RedisLimiter(url, key_prefix=prefix, lease_s=0.3)
        probe = Redis.from_url(url)
        try:
            decisions = [await limiter.admit(limits, "r1", 1)]
            decisions.append(await limiter.admit(limits, "r2", 1))
            ttls_ms = [
                await probe.pttl(key) for limit in limits for key in limit_keys(prefix, limit)
            ]
            await asyncio.sleep(0.4)
            decisions.append(await limiter.admit(limits, "r3", 1))
            return decisions, ttls_ms
        finally:
            await probe.aclose()
            await limiter.close()

    decisions, ttls_ms = asyncio.run(run())
    assert [summary(d) for d in decisions] == [
        (True, None, False),
        (False, limits[0], False),
        (True, None, False),
    ]
    lease_ttl_ms, *window_ttls_ms = ttls_ms
    assert 0 < lease_ttl_ms <= 1_300
    assert all(60_000 < ttl <= 62_000 for ttl in window_ttls_ms)


def test_window_slides(url: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a 4 s window: a refusal waits until enough of the oldest entries leave (the walk),
    and once they have left the request fits. (4 s, not 1: on a loaded machine the three admits
    below took over a second, and r2 had left the window before it could be looked at.)"""
    window_s = 4.0
    monkeypatch.setattr(limiter_redis, "WINDOW_S", window_s)
    limit = Limit("tenant:acme", TOKENS, 100)
    zset = limit_keys(prefix, limit)[0]

    async def run() -> None:
        limiter = RedisLimiter(url, key_prefix=prefix)
        probe = Redis.from_url(url)
        try:
            for request_id, tokens in (("r1", 30), ("r2", 30), ("r3", 40)):
                assert isinstance(await limiter.admit([limit], request_id, tokens), Admitted)
                await asyncio.sleep(0.15)
            before = await redis_now_s(probe)
            refused = await limiter.admit([limit], "r4", 50)
            after = await redis_now_s(probe)
            # 50 more needs r1 and r2 to leave: the wait ends when r2 is window_s old
            r2_at = await probe.zscore(zset, "r2")
            assert r2_at is not None
            assert isinstance(refused, Refused)
            assert r2_at + window_s - after <= refused.retry_after_s <= r2_at + window_s - before
            await asyncio.sleep(refused.retry_after_s + 0.02)
            assert isinstance(await limiter.admit([limit], "r4", 50), Admitted)
            # r1 and r2 have left; r3 too if this loaded machine slept past its window as well
            members = await probe.zrange(zset, 0, -1)
            assert members in ([b"r3", b"r4"], [b"r4"])
            in_window = b"90" if b"r3" in members else b"50"
            assert await probe.get(limit_keys(prefix, limit)[2]) == in_window
        finally:
            await probe.aclose()
            await limiter.close()

    asyncio.run(run())


def test_a_request_bigger_than_a_limit_is_refused_for_good(url: str, prefix: str) -> None:
    limits = [Limit("key:k1", CONCURRENT, 0), Limit("tenant:acme", TOKENS, 100)]

    async def run() -> Decision:
        limiter = RedisLimiter(url, key_prefix=prefix)
        try:
            return await limiter.admit(limits, "r1", 101)
        finally:
            await limiter.close()

    decision = asyncio.run(run())
    assert isinstance(decision, Refused)
    assert decision.limit == limits[1]
    assert decision.never
    assert decision.retry_after_s == float("inf")


def test_a_repeated_call_replaces_its_first_run(url: str, prefix: str) -> None:
    """A retry after a lost reply (same request id) is neither counted twice nor refused by the
    first run's own entries."""
    limits = [Limit("tenant:acme", TOKENS, 100), Limit("key:k1", CONCURRENT, 1)]

    async def run() -> tuple[list[Decision], int, int]:
        limiter = RedisLimiter(url, key_prefix=prefix)
        probe = Redis.from_url(url)
        try:
            decisions = [await limiter.admit(limits, "r1", 80) for _ in range(2)]
            decisions.append(await limiter.admit(limits, "r1", 100))
            decisions.append(await limiter.admit(limits[:1], "r2", 1))
            total = int(await probe.get(limit_keys(prefix, limits[0])[2]) or 0)
            return decisions, total, await probe.zcard(limit_keys(prefix, limits[1])[0])
        finally:
            await probe.aclose()
            await limiter.close()

    decisions, total, slots = asyncio.run(run())
    assert [summary(d) for d in decisions] == [(True, None, False)] * 3 + [
        (False, limits[0], False)
    ]
    assert total == 100
    assert slots == 1


# --- (6) an unreachable Redis -------------------------------------------------------------------


def test_unreachable_redis_is_a_gpuplex_error() -> None:
    async def run() -> LimiterUnavailable:
        limiter = RedisLimiter("redis://gw:s3cret@127.0.0.1:1/0")
        try:
            with pytest.raises(LimiterUnavailable) as caught:
                await limiter.admit([Limit("tenant:acme", TOKENS, 100)], "r1", 1)
            return caught.value
        finally:
            await limiter.close()

    error = asyncio.run(run())
    assert error.code is ErrorCode.LIMITER_UNAVAILABLE
    assert "127.0.0.1:1" in error.message
    assert "s3cret" not in error.message
    assert "GPUPLEX_REDIS_URL" in error.message


def test_a_url_redis_cannot_use_is_a_gpuplex_error() -> None:
    with pytest.raises(LimiterUnavailable, match="http://x:6379"):
        RedisLimiter("http://x:6379")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:pw@cache:6380/1", "redis://:***@cache:6380/1"),
        ("rediss://user:pw@[::1]:6379", "rediss://user:***@[::1]:6379"),
    ],
)
def test_urls_are_shown_without_passwords(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


# --- (7) leases end with the request, even when Redis stalls ------------------------------------


def test_a_leases_ttl_is_at_most_the_configured_lease(url: str, prefix: str) -> None:
    """A slot nobody settles (its gateway died) is back after the lease, not minutes later."""
    lease_s = 7.0
    limit = Limit("key:k1", CONCURRENT, 2)
    (key,) = limit_keys(prefix, limit)

    async def run() -> tuple[int, float, float]:
        limiter = RedisLimiter(url, key_prefix=prefix, lease_s=lease_s)
        probe = Redis.from_url(url)
        try:
            before = await redis_now_s(probe)
            assert isinstance(await limiter.admit([limit], "r1", 1), Admitted)
            ttl_ms = await probe.pttl(key)
            lease_end = await probe.zscore(key, "r1")
            assert lease_end is not None
            return ttl_ms, lease_end, before
        finally:
            await probe.aclose()
            await limiter.close()

    ttl_ms, lease_end, before = asyncio.run(run())
    assert lease_s * 1000 - 1000 < ttl_ms <= lease_s * 1000
    assert before < lease_end - lease_s < before + 1


def test_a_settle_redis_missed_frees_the_slot_soon_after_redis_returns(
    url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis stalls (CLIENT PAUSE) as a request ends: its settle cannot reach it. The settle is
    queued, not lost, and the slot frees within moments of Redis answering again, not when the
    lease ends. (Pauses the test Redis for 1.5 s: other clients of it wait, none fails.)"""
    monkeypatch.setattr(limiter_redis, "COMMAND_TIMEOUT_S", 0.3)  # so the settle gives up first
    # a failed call must give its connection back: with 2, one leaked per retry would starve it
    monkeypatch.setattr(limiter_redis, "MAX_CONNECTIONS", 2)
    pause_s = 1.5
    limit = Limit("key:k1", CONCURRENT, 1)
    (key,) = limit_keys(prefix, limit)

    async def run() -> None:
        limiter = RedisLimiter(url, key_prefix=prefix, lease_s=600)
        probe = Redis.from_url(url)
        try:
            assert isinstance(await limiter.admit([limit], "r1", 1), Admitted)
            await probe.client_pause(int(pause_s * 1000), all=True)
            paused_at = time.monotonic()
            await limiter.settle([limit], "r1", 0)  # does not raise: queued
            assert limiter.unsettled == 1
            assert time.monotonic() - paused_at < pause_s  # it did not wait out the stall
            resumes_at = paused_at + pause_s
            while limiter.unsettled and time.monotonic() < resumes_at + 5:
                await asyncio.sleep(0.02)
            freed_after_s = time.monotonic() - resumes_at
            assert limiter.unsettled == 0
            assert freed_after_s < 1.5, f"the slot freed {freed_after_s:.2f} s after Redis returned"
            assert await probe.zcard(key) == 0
            assert isinstance(await limiter.admit([limit], "r2", 1), Admitted)
            await limiter.settle([limit], "r2", 0)  # Redis is back: settled at once
            assert limiter.unsettled == 0
            assert await probe.zcard(key) == 0
        finally:
            await probe.aclose()
            await limiter.close()

    asyncio.run(run())


def test_queued_settles_give_up_when_their_lease_has_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With Redis gone for good, a queued settle is retried no longer than its lease."""

    async def run() -> int:
        limiter = RedisLimiter("redis://127.0.0.1:1/0", lease_s=0.4)
        try:
            await limiter.settle([Limit("key:k1", CONCURRENT, 1)], "r1", 0)
            assert limiter.unsettled == 1
            await asyncio.sleep(1.5)
            return limiter.unsettled
        finally:
            await limiter.close()

    assert asyncio.run(run()) == 0
