"""The in-process rate limiter: the pure rules of `core.serve.limits` on this process's state.
Exact for one gateway process; several processes share limits through `limiter_redis`.

Its windows and leases run on the monotonic clock: they live only in this process, and a step of
the wall clock (NTP, `date -s`) must neither empty a window (a free minute for everyone) nor
stretch it (an hour of 429s)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.limits import (
    DEFAULT_LEASE_S,
    Decision,
    Limit,
    LimiterState,
    admit,
    settle,
)


class Limiter(Protocol):
    async def admit(self, limits: Sequence[Limit], request_id: str, tokens: int) -> Decision: ...

    async def settle(
        self, limits: Sequence[Limit], request_id: str, actual_tokens: int
    ) -> None: ...

    async def close(self) -> None: ...


class MemoryLimiter:
    def __init__(self, lease_s: float = DEFAULT_LEASE_S, clock: Clock = SYSTEM_CLOCK) -> None:
        self.state = LimiterState()
        self.lease_s = lease_s
        self._clock = clock
        self._decisions = 0

    async def admit(self, limits: Sequence[Limit], request_id: str, tokens: int) -> Decision:
        now = self._clock.monotonic_s()
        self._decisions += 1
        if self._decisions % 10_000 == 0:
            self.state.prune(now)
        return admit(self.state, limits, request_id, tokens, now, self.lease_s)

    async def settle(self, limits: Sequence[Limit], request_id: str, actual_tokens: int) -> None:
        settle(self.state, limits, request_id, actual_tokens)

    async def close(self) -> None:
        return None
