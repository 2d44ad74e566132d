"""The model server workloads the gateway sends requests to: each with its replicas (health,
breaker, load), its fair queue, and a loop that checks `/health` on every replica."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from gpuplex.clock import now_s
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

log = logging.getLogger(__name__)


class BackendPool:
    def __init__(self, backend: Backend, settings: GatewaySpec, workers: int) -> None:
        self.id = backend.id
        self.replicas = [ReplicaState(url) for url in backend.urls]
        self.breaker = BreakerSettings(settings.breaker_failures, float(settings.breaker_open_s))
        in_flight = max(1, settings.max_in_flight_per_backend // workers)
        self.queue = BackendQueue(
            in_flight, settings.max_waiting_per_tenant, float(settings.max_wait_s)
        )

    def any_available(self) -> bool:
        now = now_s()
        return any(r.available(now, self.breaker.open_s) for r in self.replicas)

    def choose(self) -> ReplicaState | None:
        replica = choose_replica(self.replicas, now_s(), self.breaker)
        if replica is not None:
            replica.in_flight += 1
        return replica

    def done(self, replica: ReplicaState, ok: bool) -> None:
        replica.in_flight -= 1
        if ok:
            record_success(replica)
        else:
            record_failure(replica, now_s(), self.breaker)
            log.warning("backend %s replica %s failed", self.id, replica.url)

    async def check_health(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        await asyncio.gather(*(self._check(session, r, timeout_s) for r in self.replicas))

    async def _check(
        self, session: aiohttp.ClientSession, replica: ReplicaState, timeout_s: float
    ) -> None:
        try:
            async with session.get(
                f"{replica.url}/health", timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as reply:
                healthy = reply.status == 200
        except (aiohttp.ClientError, TimeoutError, OSError):
            healthy = False
        if healthy != replica.healthy:
            log.warning(
                "backend %s replica %s is %s", self.id, replica.url, "up" if healthy else "down"
            )
        record_health(replica, healthy)


async def run_health_checks(
    pools: list[BackendPool],
    session: aiohttp.ClientSession,
    interval_s: float,
    stop: asyncio.Event,
) -> None:
    while not stop.is_set():
        await asyncio.gather(*(p.check_health(session, min(interval_s, 2.0)) for p in pools))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
