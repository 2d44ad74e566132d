"""Rate-limit math: requests per minute, tokens per minute, concurrent requests, per key and per
tenant, decided together so that a request is admitted by all of its limits or by none.

Per-minute limits are sliding windows: at any moment, what was admitted in the last 60 s plus the
new request must fit the limit. That is what "tokens per minute" means to the people who set it,
and it holds from the first second: a token bucket (or GCRA) that lets a fresh key burst its whole
minute and then refill admits up to twice the limit in the first minute.

A request reserves its tokens at admission (prompt estimate + `max_tokens`), so concurrent requests
cannot overshoot; `settle` later replaces the reservation with what the response's usage says, which
gives back what was not used. Concurrency slots are leases (`concurrency_lease_s`): a gateway that
dies holding one cannot leak it for longer than the lease, which is its request's longest life.

The state here is one process's. `gateway.limiter_redis` runs the same rules as one Lua script per
decision so that several gateway processes share one limit; tests check the two agree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from gpuplex.core.spec.rate_limits import RateLimits

WINDOW_S = 60.0


class LimitKind(StrEnum):
    """A kind of limit, named by its `RateLimits` field (a test holds them equal). The names are
    also in the limiter's Redis keys, and `limiter_redis.lua` is given them when it is loaded."""

    REQUESTS = "requests_per_min"
    TOKENS = "tokens_per_min"
    CONCURRENT = "concurrent_requests"


@dataclass(frozen=True, slots=True)
class Limit:
    """One limit on one scope, e.g. ("tenant:acme", TOKENS, 100_000)."""

    scope: str
    kind: LimitKind
    amount: int

    @property
    def state_key(self) -> str:
        return f"{self.scope}:{self.kind}"

    def cost(self, tokens: int) -> int:
        """What one request with this token reservation takes from this limit."""
        return tokens if self.kind is LimitKind.TOKENS else 1


def scope_limits(scope: str, limits: RateLimits) -> tuple[Limit, ...]:
    """The limits one scope sets (`key:<prefix>` or `tenant:<name>`); None is no limit of that kind."""
    return tuple(
        Limit(scope, kind, amount)
        for kind, amount in (
            (LimitKind.REQUESTS, limits.requests_per_min),
            (LimitKind.TOKENS, limits.tokens_per_min),
            (LimitKind.CONCURRENT, limits.concurrent_requests),
        )
        if amount is not None
    )


@dataclass(frozen=True, slots=True)
class Admitted:
    request_id: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Over `limit`. `retry_after_s` is when it would fit if nothing else arrived; `never` is True
    when the request alone is bigger than the limit (waiting cannot help)."""

    limit: Limit
    retry_after_s: float
    never: bool = False


Decision = Admitted | Refused


@dataclass(slots=True)
class SlidingWindow:
    """What one per-minute limit admitted in the last WINDOW_S seconds, oldest first.

    Kept as columns of plain floats, ints and strings plus a `dict[str, int]` index, not as an
    object per request: a busy limit holds a minute of requests (60,000 at 1,000 req/s), and
    CPython's garbage collector never tracks floats, ints, strings or a dict of only those, so a
    full collection does not walk them. An object per entry made the gateway's full collections
    take tens of milliseconds (docs/benchmarks.md). Entries `head` onwards are live; the expired
    prefix is cut off once it is as long as what remains.
    """

    at_s: list[float] = field(default_factory=list)
    amounts: list[int] = field(default_factory=list)
    request_ids: list[str] = field(default_factory=list)
    #: request id -> its position, counted from the first entry ever added (`base` + index)
    position: dict[str, int] = field(default_factory=dict)
    head: int = 0  # index of the oldest live entry
    base: int = 0  # positions of the entries cut off so far
    total: int = 0

    def __len__(self) -> int:
        return len(self.at_s) - self.head

    def expire(self, now_s: float) -> None:
        horizon = now_s - WINDOW_S
        at_s, head = self.at_s, self.head
        while head < len(at_s) and at_s[head] <= horizon:
            self.total -= self.amounts[head]
            del self.position[self.request_ids[head]]
            head += 1
        self.head = head
        if head and head * 2 >= len(at_s):
            del at_s[:head], self.amounts[:head], self.request_ids[:head]
            self.base += head
            self.head = 0

    def wait_for_room_s(self, now_s: float, need: int, limit: int) -> float:
        """Seconds until `need` fits, as the oldest entries leave the window."""
        excess = self.total + need - limit
        if excess <= 0:
            return 0.0
        for index in range(self.head, len(self.at_s)):
            excess -= self.amounts[index]
            if excess <= 0:
                return max(0.0, self.at_s[index] + WINDOW_S - now_s)
        return WINDOW_S

    def add(self, now_s: float, request_id: str, amount: int) -> None:
        self.position[request_id] = self.base + len(self.at_s)
        self.at_s.append(now_s)
        self.amounts.append(amount)
        self.request_ids.append(request_id)
        self.total += amount

    def correct(self, request_id: str, amount: int) -> None:
        position = self.position.get(request_id)
        if position is not None:
            index = position - self.base
            self.total += amount - self.amounts[index]
            self.amounts[index] = amount


@dataclass(slots=True)
class Leases:
    """Concurrency slots held by requests in flight, each until it is released or its lease ends."""

    until_s: dict[str, float] = field(default_factory=dict)

    def expire(self, now_s: float) -> None:
        for request_id in [r for r, until in self.until_s.items() if until <= now_s]:
            del self.until_s[request_id]


@dataclass(slots=True)
class LimiterState:
    """All windows and leases one limiter holds, by `Limit.state_key`."""

    windows: dict[str, SlidingWindow] = field(default_factory=dict)
    leases: dict[str, Leases] = field(default_factory=dict)

    def window(self, limit: Limit) -> SlidingWindow:
        """The limit's window, made on first use."""
        window = self.windows.get(limit.state_key)
        if window is None:
            window = self.windows[limit.state_key] = SlidingWindow()
        return window

    def lease_set(self, limit: Limit) -> Leases:
        """The limit's leases, made on first use."""
        leases = self.leases.get(limit.state_key)
        if leases is None:
            leases = self.leases[limit.state_key] = Leases()
        return leases

    def prune(self, now_s: float) -> None:
        """Forget windows and lease sets with nothing in them (keeps memory bounded by activity)."""
        for key, window in list(self.windows.items()):
            window.expire(now_s)
            if not window:
                del self.windows[key]
        for key, leases in list(self.leases.items()):
            leases.expire(now_s)
            if not leases.until_s:
                del self.leases[key]

    def used(self, limit: Limit, now_s: float) -> int:
        """How much of `limit` is taken now. Asking keeps nothing for a limit never used."""
        if limit.kind is LimitKind.CONCURRENT:
            leases = self.leases.get(limit.state_key)
            if leases is None:
                return 0
            leases.expire(now_s)
            return len(leases.until_s)
        window = self.windows.get(limit.state_key)
        if window is None:
            return 0
        window.expire(now_s)
        return window.total


#: Added to a request's longest life in the gateway to make its lease: the moments between the
#: timers (writing the usage record, the settle's own round trip) and clock rounding.
LEASE_MARGIN_S = 10.0


def concurrency_lease_s(
    upstream_timeout_s: float, max_wait_s: float, body_timeout_s: float
) -> float:
    """How long a concurrency slot is held when its request is never settled (the gateway died, or
    the settle could not reach shared state before the lease ran out):

        lease = body_timeout_s + max_wait_s + upstream_timeout_s + LEASE_MARGIN_S

    the longest a request can live in the gateway (its body arriving, waiting in its queue, the
    model server answering, streamed reply included) plus a margin. A live request is settled
    before that, so its slot is never taken from under it; a lost one frees its slot soon after it
    could have ended. (The body is read before admission today; counting it keeps the lease right
    if that order changes.)"""
    return body_timeout_s + max_wait_s + upstream_timeout_s + LEASE_MARGIN_S


#: The lease for the gateway spec's default timeouts (300 s upstream, 30 s queue, 10 s body).
DEFAULT_LEASE_S = concurrency_lease_s(300.0, 30.0, 10.0)

#: What a concurrency refusal suggests waiting: a slot frees when some request finishes.
CONCURRENCY_RETRY_S = 1.0


def admit(
    state: LimiterState,
    limits: Sequence[Limit],
    request_id: str,
    tokens: int,
    now_s: float,
    lease_s: float = DEFAULT_LEASE_S,
) -> Decision:
    """Admit a request under every limit, or refuse it naming the limit that waits longest."""
    worst: Refused | None = None
    for limit in limits:
        refusal = _check(state, limit, tokens, now_s)
        if refusal is not None and (
            worst is None
            or refusal.never > worst.never
            or (refusal.never == worst.never and refusal.retry_after_s > worst.retry_after_s)
        ):
            worst = refusal
    if worst is not None:
        return worst
    for limit in limits:
        if limit.kind is LimitKind.CONCURRENT:
            state.lease_set(limit).until_s[request_id] = now_s + lease_s
        else:
            state.window(limit).add(now_s, request_id, limit.cost(tokens))
    return Admitted(request_id)


def _check(state: LimiterState, limit: Limit, tokens: int, now_s: float) -> Refused | None:
    if limit.kind is LimitKind.CONCURRENT:
        if state.used(limit, now_s) + 1 > limit.amount:
            return Refused(limit, CONCURRENCY_RETRY_S)
        return None
    need = limit.cost(tokens)
    if need > limit.amount:
        return Refused(limit, math.inf, never=True)
    window = state.window(limit)
    window.expire(now_s)
    wait_s = window.wait_for_room_s(now_s, need, limit.amount)
    return Refused(limit, wait_s) if wait_s > 0 else None


def settle(
    state: LimiterState, limits: Sequence[Limit], request_id: str, actual_tokens: int
) -> None:
    """The request is over: its token entries become what it used; its concurrency slots free."""
    for limit in limits:
        if limit.kind is LimitKind.CONCURRENT:
            state.lease_set(limit).until_s.pop(request_id, None)
        elif limit.kind is LimitKind.TOKENS:
            state.window(limit).correct(request_id, actual_tokens)


def retry_after_header(refusal: Refused) -> str:
    """Whole seconds for `Retry-After`, rounded up, at least 1."""
    if refusal.never:
        return str(int(WINDOW_S))
    return str(max(1, math.ceil(refusal.retry_after_s)))
