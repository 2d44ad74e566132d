"""The in-process limiter's clock and leases: a concurrency slot is held for the gateway's lease
(`concurrency_lease_s`: the longest a request can live, plus a margin) and no longer, settling
frees it at once, and its windows run on the monotonic clock, so a step of the wall clock neither
empties a window nor stretches it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from gpuplex.core.serve.limits import (
    DEFAULT_LEASE_S,
    LEASE_MARGIN_S,
    WINDOW_S,
    Admitted,
    Decision,
    Limit,
    LimitKind,
    Refused,
    concurrency_lease_s,
)
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.gateway.limiter_memory import MemoryLimiter
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.settings import GatewaySettings
from tests.clocks import ManualClock

SLOT = Limit("key:k1", LimitKind.CONCURRENT, 1)
PER_MINUTE = Limit("tenant:acme", LimitKind.REQUESTS, 2)


def admit(limiter: MemoryLimiter, limit: Limit, request_id: str) -> Decision:
    return asyncio.run(limiter.admit([limit], request_id, 1))


def test_the_lease_is_the_longest_life_of_a_request_plus_a_margin() -> None:
    assert concurrency_lease_s(120, 20, 5) == 120 + 20 + 5 + LEASE_MARGIN_S
    assert DEFAULT_LEASE_S == concurrency_lease_s(300, 30, 10) == 350  # the spec's defaults
    config = GatewaySpec(upstream_timeout_s=20, max_wait_s=4.5, body_timeout_s=2)
    settings = GatewaySettings(Path("unused.yaml"), "sqlite://", Path("unused"))
    runtime = cast(GatewayRuntime, SimpleNamespace(started=config, settings=settings))
    limiter = GatewayRuntime._limiter(runtime)
    assert isinstance(limiter, MemoryLimiter)
    assert limiter.lease_s == 20 + 4.5 + 2 + LEASE_MARGIN_S


def test_a_slot_is_held_for_its_lease_and_no_longer() -> None:
    clock = ManualClock(5_000.0)
    limiter = MemoryLimiter(lease_s=30, clock=clock)
    assert isinstance(admit(limiter, SLOT, "lost"), Admitted)  # never settled: its gateway died
    clock.advance(29.9)
    refused = admit(limiter, SLOT, "r2")
    assert isinstance(refused, Refused)
    assert refused.limit == SLOT
    clock.advance(0.1)
    assert isinstance(admit(limiter, SLOT, "r3"), Admitted)


def test_a_settle_frees_the_slot_at_once() -> None:
    clock = ManualClock(5_000.0)
    limiter = MemoryLimiter(lease_s=30, clock=clock)
    assert isinstance(admit(limiter, SLOT, "r1"), Admitted)
    asyncio.run(limiter.settle([SLOT], "r1", 0))
    assert isinstance(admit(limiter, SLOT, "r2"), Admitted)


@pytest.mark.parametrize("step_s", [3600.0, -3600.0, WINDOW_S + 1])
def test_a_wall_clock_step_neither_empties_nor_stretches_a_window(
    monkeypatch: pytest.MonkeyPatch, step_s: float
) -> None:
    limiter = MemoryLimiter()  # the real clock: the monotonic one
    assert [type(admit(limiter, PER_MINUTE, f"r{n}")) for n in range(3)] == [
        Admitted,
        Admitted,
        Refused,
    ]
    wall = time.time()
    monkeypatch.setattr(time, "time", lambda: wall + step_s)  # NTP or `date -s`
    refused = admit(limiter, PER_MINUTE, "r3")
    assert isinstance(refused, Refused)  # the window still holds its two requests
    assert 0 < refused.retry_after_s <= WINDOW_S  # and still ends within its minute


def test_the_window_ends_when_the_monotonic_clock_says_so() -> None:
    clock = ManualClock(5_000.0)
    limiter = MemoryLimiter(clock=clock)
    for n in range(2):
        assert isinstance(admit(limiter, PER_MINUTE, f"r{n}"), Admitted)
    clock.advance(WINDOW_S - 0.5)
    assert isinstance(admit(limiter, PER_MINUTE, "r2"), Refused)
    clock.advance(0.5)
    assert isinstance(admit(limiter, PER_MINUTE, "r3"), Admitted)
