"""The model server workloads the gateway sends requests to: each with its replicas (health,
breaker, load), its fair queue, and a loop that checks `/health` on every replica.

Readiness: a replica whose `/health` does not answer 200 is sent no request (a model server
loading its weights answers nothing for a minute or more). A new pool (the gateway's start, a new
revision) is checked within NEW_POOL_CHECK_S, not after a whole interval; until that first check
its replicas are tried, so that a route moved to a running server loses no request, and a server
still starting refuses the connection (503 to the client, a failure for its breaker). A backend is
`starting` until one of its replicas has answered a check, `ready` while one does, `down` after.
A starting backend is checked again every STARTING_CHECK_S, not once an interval: a model server
that has just come up gets its first request within that, not up to `health_interval_s` later
(`gpuplex up` waits for every one before it says it is up). A ready or down backend is checked
once an interval.

The health checks have an HTTP client of their own, with one kept-alive connection per replica,
never the forwarding pool: when forwarding is saturated, or the process is out of file descriptors,
a check still goes out on its open connection; and a check that cannot even open a socket here
(EMFILE, ENFILE, ENOBUFS, ENOMEM) says nothing about the replica, so it changes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Callable, Collection
from enum import StrEnum
from typing import Any

import aiohttp

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.routes import Backend
from gpuplex.core.serve.routing import (
    BreakerSettings,
    ReplicaState,
    choose_replica,
    record_failure,
    record_health,
    record_success,
)
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.gateway.queues import BackendQueue
from gpuplex.gateway.replica_identity import IdentityCheckingConnector, ReplicaIdentityCheck
from gpuplex.observe import gateway_metrics as metrics

log = logging.getLogger(__name__)

#: Errors of this process, not of the replica: a check that fails with one is not counted.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: How soon a pool no check has seen yet is checked.
NEW_POOL_CHECK_S = 0.1
#: How often a pool none of whose replicas has ever answered (`starting`) is checked again.
STARTING_CHECK_S = 0.25


class BackendState(StrEnum):
    STARTING = "starting"  # no replica has answered its health check yet
    READY = "ready"  # a replica answers
    DOWN = "down"  # none does, and one did before


class BackendPool:
    def __init__(
        self, backend: Backend, settings: GatewaySpec, workers: int, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.id = backend.id
        self.replicas = [ReplicaState(url) for url in backend.urls]
        self.checked = False  # a round of health checks has seen it
        self.checked_at_s = 0.0  # when the last round ended, on `clock`
        self.was_ready = False
        self.breaker = BreakerSettings(settings.breaker_failures, float(settings.breaker_open_s))
        in_flight = max(1, settings.max_in_flight_per_backend // workers)
        self.queue = BackendQueue(
            in_flight, settings.max_waiting_per_tenant, float(settings.max_wait_s)
        )

    def state(self) -> BackendState:
        if self.checked and any(r.healthy for r in self.replicas):
            return BackendState.READY
        return BackendState.DOWN if self.was_ready else BackendState.STARTING

    def due_before_the_interval(self) -> bool:
        """Whether to check it now rather than with the next round: no check has seen it yet, or
        none of its replicas has ever answered and the last check is STARTING_CHECK_S old."""
        if not self.checked:
            return True
        starting = self.state() is BackendState.STARTING
        return starting and self.clock.now_s() - self.checked_at_s >= STARTING_CHECK_S

    def any_available(self) -> bool:
        now = self.clock.now_s()
        return any(r.available(now, self.breaker.open_s) for r in self.replicas)

    def choose(self) -> ReplicaState | None:
        replica = choose_replica(self.replicas, self.clock.now_s(), self.breaker)
        if replica is not None:
            replica.in_flight += 1
        return replica

    def done(self, replica: ReplicaState, ok: bool) -> None:
        replica.in_flight -= 1
        if ok:
            record_success(replica)
        else:
            record_failure(replica, self.clock.now_s(), self.breaker)
            log.warning("backend %s replica %s failed", self.id, replica.url)

    async def check_health(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        await asyncio.gather(*(self._check(session, r, timeout_s) for r in self.replicas))
        self.checked = True
        self.checked_at_s = self.clock.now_s()
        self.was_ready = self.was_ready or any(r.healthy for r in self.replicas)
        metrics.BACKEND_REPLICAS_UP.labels(self.id).set(sum(r.healthy for r in self.replicas))

    async def _check(
        self, session: aiohttp.ClientSession, replica: ReplicaState, timeout_s: float
    ) -> None:
        try:
            async with session.get(
                f"{replica.url}/health", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as reply:
                await reply.read()  # to the end, so the connection is kept for the next check
                healthy = reply.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            if is_local_failure(error):
                log.warning("health check of %s not made here: %s", replica.url, error)
                return
            healthy = False
        if healthy != replica.healthy:  # going down is news an operator acts on; coming up is not
            level = logging.INFO if healthy else logging.WARNING
            state = "up" if healthy else "down"
            log.log(level, "backend %s replica %s is %s", self.id, replica.url, state)
        record_health(replica, healthy)


def is_local_failure(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is this process running out of something."""
    seen: BaseException | None = error
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in LOCAL_ERRNOS:
            return True
        os_error = getattr(seen, "os_error", None)  # aiohttp's ClientConnectorError
        if isinstance(os_error, OSError) and os_error.errno in LOCAL_ERRNOS:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def health_session(
    replicas: int, interval_s: float, identity: ReplicaIdentityCheck | None = None
) -> aiohttp.ClientSession:
    """The health checks' own client: a connection per replica, kept open between checks. With
    `identity`, a connection answered by anything but the replica published on its port is
    refused (the check fails), as the forwarding client's is."""
    options: dict[str, Any] = {
        "limit": max(1, replicas),
        "limit_per_host": 1,
        # under uvicorn's 5 s idle close (vLLM's server): a check every `interval_s` above that
        # opens a fresh connection rather than race the server closing the old one
        "keepalive_timeout": 4.0,
    }
    connector = (
        aiohttp.TCPConnector(**options)
        if identity is None
        else IdentityCheckingConnector(identity, **options)
    )
    return aiohttp.ClientSession(connector=connector)


async def run_health_checks(
    pools: Callable[[], Collection[BackendPool]],
    interval_s: float,
    stop: asyncio.Event,
    identity: ReplicaIdentityCheck | None = None,
) -> None:
    """Check every replica of the pools `pools()` gives now (they change with the revision)."""
    replicas = sum(len(p.replicas) for p in pools())
    timeout_s = min(interval_s, 2.0)
    loop = asyncio.get_running_loop()
    async with health_session(replicas, interval_s, identity) as session:
        while not stop.is_set():
            checked = list(pools())
            await asyncio.gather(*(p.check_health(session, timeout_s) for p in checked))
            next_round = loop.time() + interval_s
            while not stop.is_set() and (left := next_round - loop.time()) > 0:
                due = [p for p in pools() if p.due_before_the_interval()]
                if due:
                    await asyncio.gather(*(p.check_health(session, timeout_s) for p in due))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), min(left, NEW_POOL_CHECK_S))
