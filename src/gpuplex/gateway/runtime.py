"""Everything one gateway worker holds: the routing table and backend pools from the spec, the key
cache, the rate limiter, the usage spool, the upstream HTTP client, and the background tasks that
keep them fresh. Built at startup, closed at shutdown. The spool is moved into the store by a
process of its own (`mover_process`); a worker moves it only once, as it stops."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os

import aiohttp

from gpuplex.core.serve.limits import Limit, concurrency_lease_s, scope_limits
from gpuplex.core.serve.routes import RouteTable, route_table
from gpuplex.core.spec.gateway import GatewaySpec, LimiterBackend
from gpuplex.errors import GatewayError
from gpuplex.gateway.auth import KeyCache
from gpuplex.gateway.backends import BackendPool, run_health_checks
from gpuplex.gateway.limiter_memory import Limiter, MemoryLimiter
from gpuplex.gateway.relay import DisconnectWatch
from gpuplex.gateway.spool import UsageSpool
from gpuplex.gateway.spool_mover import SpoolMover
from gpuplex.settings import GatewaySettings
from gpuplex.specfile import load_spec_file
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.usage import UsageRepository

log = logging.getLogger(__name__)


def tenant_limits(table: RouteTable, tenant: str) -> tuple[Limit, ...]:
    policy = table.tenants.get(tenant)
    if policy is None:
        return ()
    return scope_limits(f"tenant:{tenant}", policy.rate_limits)


class GatewayRuntime:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        spec = load_spec_file(settings.spec_path)
        self.config: GatewaySpec = spec.gateway
        self.routes = route_table(spec, self.config.backend_host, self.config.backends)
        #: who may read /metrics (the spec's rules checked each entry parses)
        self.metrics_networks = tuple(
            ipaddress.ip_network(net, strict=False) for net in self.config.metrics_from
        )
        workers = self.config.workers
        self.pools = {
            backend_id: BackendPool(backend, self.config, workers)
            for backend_id, backend in self.routes.backends.items()
        }
        engine = open_store(settings.store_url)
        self.keys = KeyCache(
            KeyRepository(engine),
            lambda tenant: tenant_limits(self.routes, tenant),
            self.config.failed_auth_per_min,
        )
        self.keys.load()
        self.usage_sink = UsageRepository(engine)
        self.limiter: Limiter = self._limiter()
        self.spool = UsageSpool(settings.spool_dir, f"w{os.getpid()}")
        self.mover = SpoolMover(settings.spool_dir, self.usage_sink)
        self.session: aiohttp.ClientSession | None = None
        self.disconnects = DisconnectWatch()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _limiter(self) -> Limiter:
        """Concurrency leases last as long as a request can (`concurrency_lease_s`)."""
        config = self.config
        lease_s = concurrency_lease_s(
            float(config.upstream_timeout_s), float(config.max_wait_s), float(config.body_timeout_s)
        )
        if config.limiter is LimiterBackend.MEMORY:
            return MemoryLimiter(lease_s)
        from gpuplex.gateway.limiter_redis import RedisLimiter

        if not self.settings.redis_url:
            raise GatewayError("limiter: redis needs --redis-url or GPUPLEX_REDIS_URL")
        return RedisLimiter(self.settings.redis_url, lease_s=lease_s)

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=30, ttl_dns_cache=300)
        self.session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(
                total=float(self.config.upstream_timeout_s),
                sock_connect=float(self.config.connect_timeout_s),
            ),
        )
        self._tasks = [
            asyncio.create_task(self.keys.run(self._stop)),
            asyncio.create_task(self.spool.run_fsync_loop(self._stop)),
            asyncio.create_task(  # with an HTTP client of its own, never the forwarding pool
                run_health_checks(
                    list(self.pools.values()), float(self.config.health_interval_s), self._stop
                )
            ),
        ]

    async def stop(self) -> None:
        self._stop.set()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 5)
        self.spool.close()
        with contextlib.suppress(Exception):
            self.mover.move_once()
        if self.session is not None:
            await self.session.close()
        await self.limiter.close()
