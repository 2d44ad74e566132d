"""Everything one gateway worker holds: the routing table and backend pools from the spec, the key
cache, the rate limiter, the usage spool, the upstream HTTP client, and the background tasks that
keep them fresh. Built at startup, closed at shutdown. Requests are authenticated here
(`authenticate`: API keys, and service accounts' tokens). The spool is moved into the store by a
process of its own (`mover_process`); a worker moves it only once, as it stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import aiohttp

from gpuplex.core.serve.keys import bearer_token
from gpuplex.core.serve.limits import Limit, concurrency_lease_s, scope_limits
from gpuplex.core.serve.routes import RouteTable
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.gateway import GatewaySpec, LimiterBackend
from gpuplex.errors import GatewayError, GpuplexError
from gpuplex.gateway.auth import Caller, KeyCache
from gpuplex.gateway.backends import run_health_checks
from gpuplex.gateway.limiter_memory import Limiter, MemoryLimiter
from gpuplex.gateway.live import (
    LiveConfig,
    SpecFileSource,
    SpecSource,
    StoreRevisionSource,
    live_config,
    restart_only_changes,
)
from gpuplex.gateway.relay import DisconnectWatch
from gpuplex.gateway.replica_identity import IdentityCheckingConnector, ReplicaIdentityCheck
from gpuplex.gateway.service_accounts import ServiceAccounts
from gpuplex.gateway.spool import UsageSpool
from gpuplex.gateway.spool_mover import SpoolMover
from gpuplex.oidc.tokens import looks_like_jwt
from gpuplex.revision import AppliedRevisions
from gpuplex.settings import GatewaySettings
from gpuplex.store.budget_enforcement import EnforcementRepository
from gpuplex.store.db import open_store, safe_url
from gpuplex.store.keys import KeyRepository
from gpuplex.store.replica_identities import ReplicaIdentities
from gpuplex.store.spec_revisions import SpecRevisions
from gpuplex.store.usage import UsageRepository

log = logging.getLogger(__name__)

#: How often a worker asks for a newer revision: it serves by one within this, plus one query.
FOLLOW_INTERVAL_S = 0.25


def tenant_limits(table: RouteTable, tenant: str) -> tuple[Limit, ...]:
    policy = table.tenants.get(tenant)
    if policy is None:
        return ()
    return scope_limits(f"tenant:{tenant}", policy.rate_limits)


#: How long an idle connection to a model server is kept: under the 5 s after which uvicorn (vLLM's
#: and SGLang's HTTP server, by default) closes an idle one, so the gateway never sends a request
#: on a connection the server is closing at that moment (a 503 to the tenant for nothing).
UPSTREAM_KEEPALIVE_S = 4.0


class GatewayRuntime:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        engine = open_store(settings.store_url)
        self.source: SpecSource = (
            SpecFileSource(settings.spec_path)
            if settings.spec_path is not None
            else StoreRevisionSource(AppliedRevisions(SpecRevisions(engine)))
        )
        first = self.source.newest()
        if first is None:
            raise GatewayError(
                f"no spec is applied in the store {safe_url(settings.store_url)} yet: "
                "apply one (gpuplex server --spec FILE, or POST /api/v1/spec/apply), or give --config FILE"
            )
        #: the settings this process started with: those in RESTART_ONLY stay as they were
        self.started: GatewaySpec = first[1].gateway
        #: what requests are served by now; a request reads it once, as it arrives
        self.live: LiveConfig = live_config(*first, self.started)
        self.keys = KeyCache(
            KeyRepository(engine),
            lambda tenant: tenant_limits(self.live.routes, tenant),
            self.started.failed_auth_per_min,
            enforcement=EnforcementRepository(engine),
        )
        self.keys.load()
        self.service_accounts = ServiceAccounts()
        #: who each replica on this host runs as (published by the host runtime): a connection
        #: to a replica's port answered by anyone else is refused before anything is sent
        self.identity = ReplicaIdentityCheck(ReplicaIdentities(engine).all)
        self.identity.load()
        self.usage_sink = UsageRepository(engine)
        self.limiter: Limiter = self._limiter()
        self.spool = UsageSpool(settings.spool_dir, f"w{os.getpid()}")
        self.mover = SpoolMover(settings.spool_dir, self.usage_sink)
        self.session: aiohttp.ClientSession | None = None
        self.disconnects = DisconnectWatch()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._source_problem: str | None = None

    @property
    def config(self) -> GatewaySpec:
        """The `gateway:` settings served by now (per-request limits: body, reply, event size)."""
        return self.live.config

    async def authenticate(self, authorization: bytes | None, client: str) -> Caller:
        """The caller of a request: an API key's, or, where the revision served takes them
        (auth.oidc.gateway), a service account's by the identity provider's token. A credential
        that is neither is refused the same way (401 `invalid_api_key`, counted per address)."""
        live = self.live
        if live.oidc is not None:
            token = bearer_token(authorization)
            if token is not None and looks_like_jwt(token):
                account = await self.service_accounts.account(token, live.oidc, live.routes.tenants)
                if account is None:
                    self.keys.refuse(client)
                return self.keys.account_caller(account.tenant, account.prefix)
        return self.keys.authenticate(authorization, client)

    def take(self, version: str, spec: GpuplexSpec) -> bool:
        """Serve by `spec` from now on, unless it is the version served; whether it changed."""
        if version == self.live.source_version:
            return False
        restart = restart_only_changes(self.started, spec.gateway)
        if restart:
            log.warning(
                "%s changes gateway settings a running gateway keeps until restarted: %s",
                version,
                ", ".join(restart),
            )
        self.live = live_config(version, spec, self.started, self.live)
        self.keys.rebuild()  # the tenants' limits of the new revision
        log.info("serving %s", version)
        return True

    async def follow(self, interval_s: float = FOLLOW_INTERVAL_S) -> None:
        """Take each newer revision within `interval_s`; a source that cannot be read is logged
        once per new problem and asked again, and the worker keeps serving what it has."""
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            try:
                newest = await loop.run_in_executor(None, self.source.newest)
            except GpuplexError as error:
                if error.message != self._source_problem:
                    log.error("cannot take a new revision: %s", error.message)
                self._source_problem = error.message
            else:
                self._source_problem = None
                if newest is not None:
                    self.take(*newest)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval_s)

    def _limiter(self) -> Limiter:
        """Concurrency leases last as long as a request can (`concurrency_lease_s`)."""
        config = self.started
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
        connector = IdentityCheckingConnector(
            self.identity, limit=0, keepalive_timeout=UPSTREAM_KEEPALIVE_S, ttl_dns_cache=300
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(
                total=float(self.started.upstream_timeout_s),
                sock_connect=float(self.started.connect_timeout_s),
            ),
        )
        self._tasks = [
            asyncio.create_task(self.keys.run(self._stop)),
            asyncio.create_task(self.follow()),
            asyncio.create_task(self.spool.run_fsync_loop(self._stop)),
            asyncio.create_task(self.identity.run(self._stop)),
            asyncio.create_task(  # with an HTTP client of its own, never the forwarding pool
                run_health_checks(
                    lambda: self.live.pools.values(),
                    float(self.started.health_interval_s),
                    self._stop,
                    self.identity,
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
