"""One inference request through the gateway: key -> body -> model route -> rate limits (tokens
reserved) -> the backend's fair queue -> the least loaded replica -> the reply, streamed through
chunk by chunk -> limits and queue charged what was really used -> one usage record.

The usage record is written to the spool before the last bytes of the reply go out, so a client
that saw its request complete always has a record, even if the gateway is killed the next moment.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime

import aiohttp
import orjson

from gpuplex.clock import now_s, utc_now
from gpuplex.core.serve.fair_queue import QueuedRequest
from gpuplex.core.serve.inference import (
    ENDPOINT_PATHS,
    BadRequest,
    Endpoint,
    InferenceRequest,
    read_request,
)
from gpuplex.core.serve.limits import Refused, retry_after_header
from gpuplex.core.serve.routing import ReplicaState
from gpuplex.core.serve.stream_usage import StreamUsage, reply_usage
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.errors import LimiterUnavailable
from gpuplex.gateway.api_errors import ApiCode, ApiError
from gpuplex.gateway.asgi_io import Receive, Scope, Send, header, read_body
from gpuplex.gateway.auth import Caller
from gpuplex.gateway.backends import BackendPool
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.ids import new_request_id
from gpuplex.observe import gateway_metrics as metrics

log = logging.getLogger(__name__)

CLIENT_GONE = 499  # nginx's code for "the client closed the connection"


@dataclass(slots=True)
class Exchange:
    """What is known of one request as it goes through."""

    request_id: str
    started_s: float
    started_at: datetime
    caller: Caller
    request: InferenceRequest
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: int = 0
    recorded: bool = False

    @property
    def used_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


async def handle_inference(
    rt: GatewayRuntime, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
) -> None:
    client = scope.get("client") or ("unknown", 0)
    caller = rt.keys.authenticate(header(scope, b"authorization"), str(client[0]))
    started_s, started_at = now_s(), utc_now()
    config = rt.config
    raw = await read_body(scope, receive, config.max_body_kib * 1024, float(config.body_timeout_s))
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ApiError(
            ApiCode.INVALID_JSON, f"the request body is not valid JSON: {error}"
        ) from None
    request = read_request(endpoint, body, config.default_max_tokens)
    if isinstance(request, BadRequest):
        raise ApiError(ApiCode.INVALID_REQUEST, request.message, param=request.param)
    route = rt.routes.route(caller.tenant, request.model)
    if route is None or (caller.models and request.model not in caller.models):
        raise ApiError(
            ApiCode.MODEL_NOT_FOUND,
            f"The model `{request.model}` does not exist or you do not have access to it.",
            param="model",
        )
    pool = rt.pools[route.backend_id]
    if not pool.any_available():
        raise ApiError(
            ApiCode.BACKEND_UNAVAILABLE,
            f"model `{request.model}` is unavailable: its servers are down; try again later",
            retry_after_s=5,
        )
    if route.upstream_model != request.model and isinstance(body, dict):
        body["model"] = route.upstream_model
        raw = orjson.dumps(body)
    exchange = Exchange(
        new_request_id(), started_s, started_at, caller, request, request.prompt_tokens
    )
    try:
        await _admitted(rt, exchange, pool, raw, send)
    except ApiError as error:
        exchange.status = exchange.status or error.status
        metrics.REJECTIONS.labels(caller.tenant, str(error.code)).inc()
        raise
    except (OSError, asyncio.CancelledError):
        exchange.status = exchange.status or CLIENT_GONE
        raise
    finally:
        _record(rt, exchange)


async def _admitted(
    rt: GatewayRuntime, ex: Exchange, pool: BackendPool, raw: bytes, send: Send
) -> None:
    limits = ex.caller.limits
    try:
        decision = await rt.limiter.admit(limits, ex.request_id, ex.request.reserved_tokens)
    except LimiterUnavailable as error:
        log.error("%s", error.message)
        raise ApiError(
            ApiCode.LIMITER_UNAVAILABLE,
            "rate limits cannot be checked right now; try again shortly",
            retry_after_s=5,
        ) from None
    if isinstance(decision, Refused):
        ex.status = 429 if not decision.never else 400
        raise _refusal(decision)
    policy = rt.routes.tenants[ex.caller.tenant]
    queued = QueuedRequest(
        ex.request_id, ex.caller.tenant, ex.request.reserved_tokens, policy.weight, policy.priority
    )
    try:
        await _queued(rt, ex, pool, queued, raw, send)
    finally:
        try:
            await rt.limiter.settle(limits, ex.request_id, ex.used_tokens)
        except LimiterUnavailable as error:  # its reservation and slot expire on their own
            log.error("%s", error.message)


async def _queued(
    rt: GatewayRuntime,
    ex: Exchange,
    pool: BackendPool,
    queued: QueuedRequest,
    raw: bytes,
    send: Send,
) -> None:
    tenant = ex.caller.tenant
    waited_from = now_s()
    depth = metrics.QUEUE_DEPTH.labels(tenant)
    depth.inc()
    try:
        await pool.queue.acquire(queued)
    finally:
        depth.dec()
    metrics.QUEUE_WAIT.labels(tenant).observe(now_s() - waited_from)
    try:
        replica = pool.choose()
        if replica is None:
            raise ApiError(
                ApiCode.BACKEND_UNAVAILABLE,
                f"model `{ex.request.model}` is unavailable: its servers are down",
                retry_after_s=5,
            )
        await _forward(rt, ex, pool, replica, raw, send)
    finally:
        pool.queue.release(queued, ex.used_tokens)


async def _forward(
    rt: GatewayRuntime,
    ex: Exchange,
    pool: BackendPool,
    replica: ReplicaState,
    raw: bytes,
    send: Send,
) -> None:
    assert rt.session is not None  # started before serving
    url = f"{replica.url}{_PATHS[ex.request.endpoint]}"
    ok = False
    try:
        async with rt.session.post(
            url,
            data=raw,
            headers={"content-type": "application/json", "x-request-id": ex.request_id},
        ) as reply:
            ok = reply.status < 500
            content_type = reply.headers.get("content-type", "application/json")
            if ex.request.stream and reply.status == 200 and "event-stream" in content_type:
                await _stream(rt, ex, reply, send)
            else:
                await _whole(rt, ex, reply, content_type, send)
    except TimeoutError:
        raise ApiError(
            ApiCode.UPSTREAM_TIMEOUT,
            f"the model server did not answer within {rt.config.upstream_timeout_s} s",
        ) from None
    except (aiohttp.ClientError, OSError) as error:
        if ex.status:  # the reply had started: nothing more can be said to the client
            return
        log.warning("request %s to %s failed: %s", ex.request_id, replica.url, error)
        raise ApiError(
            ApiCode.BACKEND_UNAVAILABLE,
            f"model `{ex.request.model}` is unavailable: its server did not answer",
            retry_after_s=5,
        ) from None
    finally:
        pool.done(replica, ok)


#: The path each endpoint is forwarded to: the same path the client used.
_PATHS = {endpoint: path for path, endpoint in ENDPOINT_PATHS.items()}


async def _whole(
    rt: GatewayRuntime,
    ex: Exchange,
    reply: aiohttp.ClientResponse,
    content_type: str,
    send: Send,
) -> None:
    body = await reply.read()
    if reply.status == 200:
        ex.prompt_tokens, ex.completion_tokens = reply_usage(body, ex.request.prompt_tokens)
    ex.status = reply.status
    headers = [(b"content-type", content_type.encode()), (b"x-request-id", ex.request_id.encode())]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    _record(rt, ex)
    await send({"type": "http.response.body", "body": body})


async def _stream(
    rt: GatewayRuntime, ex: Exchange, reply: aiohttp.ClientResponse, send: Send
) -> None:
    usage = StreamUsage()
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-request-id", ex.request_id.encode()),
    ]
    ex.status = 200
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    try:
        async for chunk in reply.content.iter_any():
            done = usage.feed(chunk)
            ex.prompt_tokens, ex.completion_tokens = usage.tokens(ex.request.prompt_tokens)
            if done:
                _record(rt, ex)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        ex.prompt_tokens, ex.completion_tokens = usage.tokens(ex.request.prompt_tokens)
        _record(rt, ex)
        await send({"type": "http.response.body", "body": b""})
    except (OSError, asyncio.CancelledError):
        if not ex.recorded:
            ex.status = CLIENT_GONE
        raise


def _refusal(refusal: Refused) -> ApiError:
    limit = refusal.limit
    who = "this API key" if limit.scope.startswith("key:") else "your organization"
    if refusal.never:
        return ApiError(
            ApiCode.OVER_LIMIT_ALWAYS,
            f"this request needs more than {who}'s whole {limit.kind} limit ({limit.amount}); "
            "lower max_tokens or the prompt",
            param="max_tokens",
        )
    retry_after = retry_after_header(refusal)
    return ApiError(
        ApiCode.RATE_LIMITED,
        f"rate limit reached for {who}: {limit.kind} {limit.amount}; retry after {retry_after} s",
        retry_after_s=int(retry_after),
    )


def _record(rt: GatewayRuntime, ex: Exchange) -> None:
    """Write the request's usage record once (the first call wins) and count it in the metrics."""
    if ex.recorded:
        return
    ex.recorded = True
    tenant = ex.caller.tenant
    status = ex.status or 500
    latency_s = now_s() - ex.started_s
    record = UsageRecord(
        request_id=ex.request_id,
        tenant=tenant,
        key_prefix=ex.caller.key_prefix,
        model=ex.request.model,
        endpoint=str(ex.request.endpoint),
        status=status,
        prompt_tokens=ex.prompt_tokens if status == 200 else 0,
        completion_tokens=ex.completion_tokens if status == 200 else 0,
        latency_s=latency_s,
        started_at=ex.started_at,
        stream=ex.request.stream,
    )
    rt.spool.append(record)
    metrics.REQUESTS.labels(tenant, str(status)).inc()
    metrics.LATENCY.labels(tenant).observe(latency_s)
    if status == 200:
        metrics.TOKENS.labels(tenant, "prompt").inc(record.prompt_tokens)
        metrics.TOKENS.labels(tenant, "completion").inc(record.completion_tokens)
