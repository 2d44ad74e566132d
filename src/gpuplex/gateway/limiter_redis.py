"""The shared rate limiter: the rules of `core.serve.limits` on state in Redis, so that every worker
and replica of the gateway counts against one limit.

Each decision is one call of `limiter_redis.lua` (EVALSHA, loaded again if Redis lost it), atomic in
Redis, timed by Redis's own clock. Per window limit (requests or tokens per minute) three keys hold
the window: `<prefix><scope>:<kind>` (ZSET: request id -> admitted at), `...:amt` (HASH: request id
-> amount) and `...:sum` (the total); they expire a little after the window passes, so idle tenants
cost nothing. Per concurrency limit one ZSET maps request id -> lease end. Request ids are unique;
a call repeated with the same id (a retry after a lost reply) replaces its first run's entries.

Not for Redis Cluster as is: one request's keys (its key's and its tenant's limits) must sit in one
slot; a prefix with a hash tag (`{gpuplex}:rl:`) puts them there, at the cost of one shard.

Decisions that arrive in the same turn of the event loop go to Redis together, as one pipeline of
script calls (still one atomic script per decision): under load that turns hundreds of round trips a
second into a few dozen. A request with no limits, or a settle with nothing to correct, costs no call.

When Redis cannot be reached an admit raises `LimiterUnavailable`; the gateway answers 503 (it
fails closed: an unreachable limit must not become no limit). A settle that cannot reach Redis is
queued instead (at most `MAX_UNSETTLED`) and retried in the background, with backoff, until Redis
answers or the request's lease has run out anyway: a concurrency slot frees as soon as Redis is
back, not when its lease ends. Retrying is safe: a settle sets values, it adds nothing.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from string import Template
from typing import TypeGuard
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.limits import (
    CONCURRENCY_RETRY_S,
    DEFAULT_LEASE_S,
    WINDOW_S,
    Admitted,
    Decision,
    Limit,
    LimitKind,
    Refused,
)
from gpuplex.errors import LimiterUnavailable

#: Connections one gateway process keeps to Redis; more concurrent decisions wait for one.
MAX_CONNECTIONS = 64
#: How long a decision waits for a free connection before failing (closed).
POOL_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 2.0
#: A window's keys outlive its newest entry by the window plus this margin.
WINDOW_TTL_MARGIN_S = 2
#: Settles waiting for Redis to come back, at most; past it the oldest is dropped (its slot frees
#: when its lease ends, as if the gateway had died).
MAX_UNSETTLED = 10_000
#: The first retry of queued settles waits this long; each failure doubles it, up to the cap.
SETTLE_RETRY_FIRST_S = 0.05
SETTLE_RETRY_CAP_S = 1.0

log = logging.getLogger(__name__)

_WHAT_TO_CHECK = (
    "check that Redis is running and reachable from this gateway, and the URL given with "
    "--redis-url or GPUPLEX_REDIS_URL"
)


#: What `limiter_redis.lua` calls the limit kinds it treats apart, by the script's placeholder.
SCRIPT_KIND_NAMES = {"CONCURRENT": LimitKind.CONCURRENT.value, "TOKENS": LimitKind.TOKENS.value}


def lua_template() -> Template:
    """The decision script as shipped next to this module, its kind names still placeholders."""
    text = files("gpuplex.gateway").joinpath("limiter_redis.lua").read_text(encoding="utf-8")
    return Template(text)


@cache
def lua_source() -> str:
    """The decision script with the kinds' names filled in from `LimitKind`, so that renaming a
    kind cannot leave the script comparing against the old name."""
    return lua_template().substitute(SCRIPT_KIND_NAMES)


def redacted_url(url: str) -> str:
    """`url` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    netloc = f"{user}:***@{host}{port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def limit_keys(key_prefix: str, limit: Limit) -> list[str]:
    """The Redis keys that hold one limit's state, in the order the script reads them."""
    base = f"{key_prefix}{limit.state_key}"
    if limit.kind is LimitKind.CONCURRENT:
        return [base]
    return [base, f"{base}:amt", f"{base}:sum"]


class RedisLimiter:
    def __init__(
        self,
        url: str,
        key_prefix: str = "gpuplex:rl:",
        lease_s: float = DEFAULT_LEASE_S,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._clock = clock
        self.display_url = redacted_url(url)
        self.key_prefix = key_prefix
        self.lease_s = lease_s
        try:
            pool = BlockingConnectionPool.from_url(
                url,
                max_connections=MAX_CONNECTIONS,
                timeout=POOL_TIMEOUT_S,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=COMMAND_TIMEOUT_S,
                # One quick retry covers a pooled connection that Redis closed. Re-running a call
                # whose reply was lost is safe: the script replaces a request id's earlier entries.
                retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), retries=1),
            )
        except ValueError as error:
            raise LimiterUnavailable(
                f"rate limiter: cannot use Redis URL {self.display_url}: {error}; "
                "give a redis://, rediss:// or unix:// URL"
            ) from error
        self._client = Redis(connection_pool=pool)
        self._script = self._client.register_script(lua_source())
        self._window_ttl_s = math.ceil(WINDOW_S) + WINDOW_TTL_MARGIN_S
        self._pending: list[_Call] = []
        self._flushes: set[asyncio.Task[None]] = set()
        self._unsettled: deque[_Settle] = deque(maxlen=MAX_UNSETTLED)
        self._retrying: asyncio.Task[None] | None = None
        self._dropping = False

    @property
    def unsettled(self) -> int:
        """Settles queued until Redis answers again."""
        return len(self._unsettled)

    async def admit(self, limits: Sequence[Limit], request_id: str, tokens: int) -> Decision:
        """Admit the request under every limit, or refuse it naming the limit that waits longest."""
        if not limits:
            return Admitted(request_id)
        reply = await self._run("admit", limits, request_id, tokens)
        if reply == [1]:
            return Admitted(request_id)
        _, index, retry_after, never = reply
        if never == 1:
            return Refused(limits[int(index)], math.inf, never=True)
        return Refused(limits[int(index)], float(retry_after))

    async def settle(self, limits: Sequence[Limit], request_id: str, actual_tokens: int) -> None:
        """The request is over: its token entries become `actual_tokens`; its slots free."""
        to_settle = [limit for limit in limits if limit.kind is not LimitKind.REQUESTS]
        if not to_settle:
            return
        pending = _Settle(
            to_settle, request_id, actual_tokens, self._clock.monotonic_s() + self.lease_s
        )
        if self._unsettled:  # Redis is known to be away: join the queue, do not wait on it again
            self._queue(pending)
            return
        try:
            await self._run("settle", to_settle, request_id, actual_tokens)
        except LimiterUnavailable as error:
            log.error("%s; settles are queued and retried until it answers", error.message)
            self._queue(pending)

    async def close(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
            await asyncio.gather(self._retrying, return_exceptions=True)
            if self._unsettled:
                log.warning(
                    "rate limiter: closing with %d settles Redis never took; their slots free "
                    "when their leases end",
                    len(self._unsettled),
                )
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        await self._client.aclose(close_connection_pool=True)

    def _queue(self, pending: _Settle) -> None:
        if len(self._unsettled) == MAX_UNSETTLED and not self._dropping:
            self._dropping = True  # said once per outage
            log.warning(
                "rate limiter: %d settles already wait for Redis; dropping the oldest (its slot "
                "frees when its lease ends)",
                MAX_UNSETTLED,
            )
        self._unsettled.append(pending)
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.create_task(self._retry_settles())

    async def _retry_settles(self) -> None:
        """Until the queue is empty: retry every queued settle (one pipeline), backing off while
        Redis stays away; drop those whose lease has ended (nothing is left to free)."""
        delay_s = SETTLE_RETRY_FIRST_S
        settled = expired = 0
        while self._unsettled:
            await asyncio.sleep(delay_s)
            now = self._clock.monotonic_s()
            while self._unsettled and self._unsettled[0].give_up_at_s <= now:
                self._unsettled.popleft()
                expired += 1
            batch = list(self._unsettled)
            results = await asyncio.gather(
                *(self._run("settle", s.limits, s.request_id, s.tokens) for s in batch),
                return_exceptions=True,
            )
            done = {id(s) for s, result in zip(batch, results, strict=True) if not _failed(result)}
            if done:
                settled += len(done)
                self._unsettled = deque(
                    (s for s in self._unsettled if id(s) not in done), maxlen=MAX_UNSETTLED
                )
                delay_s = SETTLE_RETRY_FIRST_S
            else:
                delay_s = min(delay_s * 2, SETTLE_RETRY_CAP_S)
        self._dropping = False
        log.warning(
            "rate limiter: %d queued settles done in Redis at %s, %d given up (their leases had "
            "ended)",
            settled,
            self.display_url,
            expired,
        )

    async def _run(
        self, op: str, limits: Sequence[Limit], request_id: str, tokens: int
    ) -> list[int | bytes]:
        keys: list[str] = []
        args: list[str | int | float] = [
            op,
            request_id,
            tokens,
            self.lease_s,
            WINDOW_S,
            CONCURRENCY_RETRY_S,
            self._window_ttl_s,
        ]
        for limit in limits:
            keys.extend(limit_keys(self.key_prefix, limit))
            args.extend((limit.kind.value, limit.amount))
        call = _Call(keys, args, asyncio.get_running_loop().create_future())
        self._pending.append(call)
        if len(self._pending) == 1:  # the first of this turn: send them all on the next one
            task = asyncio.create_task(self._flush())
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        return await call.reply

    async def _flush(self) -> None:
        await asyncio.sleep(0)
        batch, self._pending = self._pending, []
        pipeline = self._client.pipeline(transaction=False)
        for call in batch:
            await self._script(keys=call.keys, args=call.args, client=pipeline)
        try:
            replies = await pipeline.execute(raise_on_error=False)
        except RedisError as error:
            replies = [error] * len(batch)
        finally:
            # a failure before the pipeline runs (its SCRIPT EXISTS timing out) leaves the
            # connection on it: give it back, or each failed call during an outage leaks one
            await pipeline.aclose()
        for call, reply in zip(batch, replies, strict=True):
            if call.reply.done():
                continue
            if isinstance(reply, RedisError):
                call.reply.set_exception(
                    LimiterUnavailable(
                        f"rate limiter: Redis at {self.display_url} failed: {reply}; "
                        f"{_WHAT_TO_CHECK}"
                    )
                )
            elif not _is_reply(reply):
                call.reply.set_exception(
                    LimiterUnavailable(
                        f"rate limiter: Redis at {self.display_url} answered {reply!r} to the "
                        "limiter script; check that it is Redis 5 or newer and that nothing else "
                        f"uses the key prefix {self.key_prefix!r}"
                    )
                )
            else:
                call.reply.set_result(reply)


@dataclass(frozen=True, slots=True)
class _Call:
    keys: list[str]
    args: list[str | int | float]
    reply: asyncio.Future[list[int | bytes]]


@dataclass(frozen=True, slots=True, eq=False)
class _Settle:
    """A settle Redis did not take yet; retried until `give_up_at_s` (monotonic), when the
    request's lease has ended anyway."""

    limits: Sequence[Limit]
    request_id: str
    tokens: int
    give_up_at_s: float


def _failed(result: object) -> bool:
    return isinstance(result, BaseException)


def _is_reply(reply: object) -> TypeGuard[list[int | bytes]]:
    """The script answers [1], or [0, index, retry_after_s, never]."""
    return (
        isinstance(reply, list)
        and len(reply) in (1, 4)
        and all(isinstance(part, int | bytes) for part in reply)
    )
