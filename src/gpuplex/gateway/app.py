"""The gateway as an ASGI application: `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
`/v1/models`, `/health` (liveness: the process answers), `/healthz` (readiness: it can serve and
bill a request, 503 naming each problem otherwise; and how many model servers are ready, starting
or down, `degraded` while one is not ready), and `/metrics`. `/metrics` names every tenant,
so it needs the metrics token (`Authorization: Bearer`, $GPUPLEX_METRICS_TOKEN), or a caller in a
network the operator listed in `gateway.metrics_from` (none by default: tenant workloads may share
the host's network, loopback included). Every error is an OpenAI-style JSON body; nothing escapes
as a traceback."""

from __future__ import annotations

import gc
import ipaddress
import logging
from collections import Counter

from gpuplex.core.serve.inference import ENDPOINT_PATHS
from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError
from gpuplex.gateway.asgi_io import (
    Receive,
    Scope,
    Send,
    header,
    send_error,
    send_json,
    send_reply,
)
from gpuplex.gateway.backends import BackendState
from gpuplex.gateway.proxy import handle_inference
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.observe import gateway_metrics as metrics
from gpuplex.observe.metrics_token import presents_metrics_token
from gpuplex.settings import GatewaySettings, gateway_settings_from_environment

log = logging.getLogger(__name__)

METRICS_HEADERS = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]


class GatewayApp:
    def __init__(self, settings: GatewaySettings) -> None:
        self.settings = settings
        self.runtime: GatewayRuntime | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as error:
                    log.error("the gateway cannot start: %s", error)
                    await send({"type": "lifespan.startup.failed", "message": str(error)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        if self.runtime is None:
            self.runtime = GatewayRuntime(self.settings)
            await self.runtime.start()
            # What startup made (modules, the spec, SQLAlchemy, aiohttp) lives as long as the
            # worker: freeze it out of the collector, so a full collection while serving walks
            # only what serving made. Unfrozen, each one took about 50 ms on the 2-core machine
            # of docs/benchmarks.md, stalling every request in flight.
            gc.collect()
            gc.freeze()

    async def shutdown(self) -> None:
        if self.runtime is not None:
            await self.runtime.stop()
            self.runtime = None

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        rt = self.runtime
        if rt is None:  # a server without lifespan support
            await self.startup()
            rt = self.runtime
        assert rt is not None
        path: str = scope["path"]
        method: str = scope["method"]
        try:
            endpoint = ENDPOINT_PATHS.get(path)
            if endpoint is not None:
                _require(method, "POST")
                await handle_inference(rt, scope, receive, send, endpoint)
            elif path == "/v1/models" or path.startswith("/v1/models/"):
                _require(method, "GET")
                await _models(rt, scope, send, path.removeprefix("/v1/models").strip("/"))
            elif path == "/health":
                await send_json(send, 200, {"status": "ok"})
            elif path == "/healthz":
                await _readiness(rt, send)
            elif path == "/metrics":
                _metrics_allowed(rt, scope)
                await send_reply(send, 200, metrics.exposition(), METRICS_HEADERS)
            else:
                raise ApiError(ErrorCode.NOT_FOUND, f"no such endpoint: {method} {path}")
        except ApiError as error:
            if error.code in (ErrorCode.INVALID_API_KEY, ErrorCode.TOO_MANY_FAILED_AUTH):
                metrics.REJECTIONS.labels(metrics.UNKNOWN_TENANT, str(error.code)).inc()
            await send_error(send, error)
        except Exception:
            log.exception("request %s %s failed inside the gateway", method, path)
            await send_error(send, ApiError(ErrorCode.INTERNAL, "internal error in the gateway"))


def _require(method: str, wanted: str) -> None:
    if method != wanted:
        raise ApiError(ErrorCode.METHOD_NOT_ALLOWED, f"use {wanted} here, not {method}")


async def _models(rt: GatewayRuntime, scope: Scope, send: Send, model_id: str) -> None:
    client = scope.get("client") or ("unknown", 0)
    caller = await rt.authenticate(header(scope, b"authorization"), str(client[0]))
    names = [
        name
        for name in rt.live.routes.models_of(caller.tenant)
        if not caller.models or name in caller.models
    ]
    cards = [{"id": n, "object": "model", "created": 0, "owned_by": caller.tenant} for n in names]
    if not model_id:
        await send_json(send, 200, {"object": "list", "data": cards})
        return
    for card in cards:
        if card["id"] == model_id:
            await send_json(send, 200, card)
            return
    raise ApiError(
        ErrorCode.MODEL_NOT_FOUND,
        f"The model `{model_id}` does not exist or you do not have access to it.",
        param="model",
    )


async def _readiness(rt: GatewayRuntime, send: Send) -> None:
    """`ok` when a request can be served and billed now, and every model server has a replica
    that answers its health check; else `degraded`, with each problem in words. 503 when the
    gateway itself cannot serve (its usage spool), 200 otherwise: a model server that is down
    or still starting makes its own models 503, not the gateway unready for every tenant. The
    backends are counted, never named: anyone may ask, and tenants do not learn each other's."""
    problems = [problem for problem in (rt.spool.ready(),) if problem is not None]
    status = 503 if problems else 200
    states = Counter(pool.state() for pool in rt.live.pools.values())
    backends = {"total": sum(states.values())} | {
        state.value: states[state] for state in BackendState
    }
    waiting = backends["total"] - backends[BackendState.READY.value]
    if waiting:
        problems.append(
            f"{waiting} of {backends['total']} model servers have no replica that answers its "
            f"health check ({states[BackendState.STARTING]} starting, "
            f"{states[BackendState.DOWN]} down): requests to their models get 503 until one does"
        )
    body = {"status": "degraded" if problems else "ok", "backends": backends}
    await send_json(send, status, body | ({"problems": problems} if problems else {}))


def _metrics_allowed(rt: GatewayRuntime, scope: Scope) -> None:
    authorization = header(scope, b"authorization")
    if authorization is not None:
        if presents_metrics_token(
            authorization.decode("latin-1"), rt.settings.metrics_token_sha256
        ):
            return
        raise ApiError(
            ErrorCode.METRICS_TOKEN_REQUIRED,
            "/metrics: that is not this gateway's metrics token ($GPUPLEX_METRICS_TOKEN)",
        )
    client = scope.get("client")
    try:
        address = ipaddress.ip_address(client[0]) if client else None
    except ValueError:
        address = None
    if address is None or not any(address in net for net in rt.live.metrics_networks):
        raise ApiError(
            ErrorCode.METRICS_TOKEN_REQUIRED,
            "/metrics names every tenant: send `Authorization: Bearer <metrics token>` (the "
            "gateway's $GPUPLEX_METRICS_TOKEN), or scrape from a network in gateway.metrics_from",
        )


def app_from_environment() -> GatewayApp:
    """The factory each worker process calls (`gpuplex gateway` exported the settings)."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return GatewayApp(gateway_settings_from_environment())
