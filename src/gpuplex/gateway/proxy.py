"""One inference request through the gateway: key -> body -> completion budget decided and written
into the forwarded body -> model route -> rate limits (tokens reserved) -> the backend's fair queue
-> the least loaded replica -> the reply, bounded in size, streamed through event by event -> limits
and queue charged what was really used -> one usage record.

The usage record is written to the spool before the last bytes of the reply go out, so a client
that saw its request complete always has a record, even if the gateway is killed the next moment;
a spool that cannot take records stops requests before they are forwarded (503). A client that
goes away cancels the request to the model server within moments (`relay.DisconnectWatch`): its slot
frees and it is billed what reached it, with status 499 (outcome `cancelled`).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import orjson

from gpuplex.clock import now_s, utc_now
from gpuplex.core.serve.fair_queue import QueuedRequest
from gpuplex.core.serve.inference import (
    ENDPOINT_PATHS,
    BadRequest,
    Endpoint,
    forwarded_body,
    read_request,
)
from gpuplex.core.serve.limits import Refused, retry_after_header
from gpuplex.core.serve.routing import ReplicaState
from gpuplex.core.serve.tokens import PromptOverhead
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec import TenantSpec
from gpuplex.errors import ErrorCode, LimiterUnavailable
from gpuplex.gateway.api_errors import ApiError
from gpuplex.gateway.asgi_io import Receive, Scope, Send, header, read_body
from gpuplex.gateway.auth import BUDGET_SCOPE
from gpuplex.gateway.backends import BackendPool
from gpuplex.gateway.relay import CLIENT_GONE, Exchange, relay_stream, relay_whole
from gpuplex.gateway.replica_identity import ReplicaIdentityRefused
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.ids import new_request_id
from gpuplex.observe import gateway_metrics as metrics

log = logging.getLogger(__name__)


async def handle_inference(
    rt: GatewayRuntime, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
) -> None:
    client = scope.get("client") or ("unknown", 0)
    caller = await rt.authenticate(header(scope, b"authorization"), str(client[0]))
    if caller.budget_block is not None:
        metrics.REJECTIONS.labels(caller.tenant, str(ErrorCode.BUDGET_EXCEEDED)).inc()
        raise ApiError(ErrorCode.BUDGET_EXCEEDED, caller.budget_block)
    started_s, started_at = now_s(), utc_now()
    live = rt.live  # this request is served by the revision in force as it arrived
    config = live.config
    raw = await read_body(scope, receive, config.max_body_kib * 1024, float(config.body_timeout_s))
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ApiError(
            ErrorCode.INVALID_JSON, f"the request body is not valid JSON: {error}"
        ) from None
    overhead = PromptOverhead(config.message_overhead_tokens, config.request_overhead_tokens)
    request = read_request(endpoint, body, config.default_max_tokens, caller.token_cap, overhead)
    if isinstance(request, BadRequest):
        code = ErrorCode.UNSUPPORTED_PARAMETER if request.unsupported else ErrorCode.INVALID_REQUEST
        raise ApiError(code, request.message, param=request.param)
    route = live.routes.route(caller.tenant, request.model)
    if route is None or (caller.models and request.model not in caller.models):
        raise ApiError(
            ErrorCode.MODEL_NOT_FOUND,
            f"The model `{request.model}` does not exist or you do not have access to it.",
            param="model",
        )
    pool = live.pools[route.backend_id]
    if not pool.any_available():
        raise ApiError(
            ErrorCode.BACKEND_UNAVAILABLE,
            f"model `{request.model}` is unavailable: its servers are down; try again later",
            retry_after_s=5,
        )
    spool_problem = rt.spool.ready()
    if spool_problem is not None:
        log.error("refusing requests: %s", spool_problem)
        raise ApiError(
            ErrorCode.USAGE_UNAVAILABLE,
            "usage cannot be recorded right now, so the request was not served; try again later",
            retry_after_s=5,
        )
    # Always re-encoded from what was read, so the server reads exactly what was counted: a body
    # with a key twice (`"max_tokens": 1, "max_tokens": 5000`) could be read otherwise by it.
    raw = orjson.dumps(forwarded_body(body, request, route.upstream_model))
    exchange = Exchange(
        new_request_id(), started_s, started_at, caller, request, route.upstream_model
    )
    task = asyncio.current_task()
    assert task is not None
    rt.disconnects.watch(receive, exchange, task)
    try:
        await _admitted(rt, exchange, live.routes.tenants[caller.tenant], pool, raw, send)
    except ApiError as error:
        exchange.status = exchange.status or error.status
        metrics.REJECTIONS.labels(caller.tenant, str(error.code)).inc()
        raise
    except asyncio.CancelledError:
        exchange.status = CLIENT_GONE
        if not exchange.client_gone or task.uncancel() > 0:
            raise  # not our cancel (the server is stopping): let it through
    except OSError:
        exchange.status = exchange.status or CLIENT_GONE
        raise
    finally:
        rt.disconnects.unwatch(exchange)
        record_usage(rt, exchange)


async def _admitted(
    rt: GatewayRuntime,
    ex: Exchange,
    policy: TenantSpec,
    pool: BackendPool,
    raw: bytes,
    send: Send,
) -> None:
    limits = ex.caller.limits
    try:
        decision = await rt.limiter.admit(limits, ex.request_id, ex.request.reserved_tokens)
    except LimiterUnavailable as error:
        log.error("%s", error.message)
        raise ApiError(
            ErrorCode.LIMITER_UNAVAILABLE,
            "rate limits cannot be checked right now; try again shortly",
            retry_after_s=5,
        ) from None
    if isinstance(decision, Refused):
        refusal = _refusal(decision, ex.caller.budget_throttle)
        ex.status = refusal.status
        raise refusal
    ex.cancellable = True
    queued = QueuedRequest(
        ex.request_id, ex.caller.tenant, ex.request.reserved_tokens, policy.weight, policy.priority
    )
    try:
        if ex.client_gone:  # went away during admission: nothing to forward
            ex.status = CLIENT_GONE
            return
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
    series = metrics.tenant_series(ex.caller.tenant)
    waited_from = now_s()
    series.queue_depth.inc()
    try:
        await pool.queue.acquire(queued)
    finally:
        series.queue_depth.dec()
    ex.queue_wait_s = now_s() - waited_from
    series.queue_wait.observe(ex.queue_wait_s)
    try:
        replica = pool.choose()
        if replica is None:
            raise ApiError(
                ErrorCode.BACKEND_UNAVAILABLE,
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
        ex.forwarded = True
        async with rt.session.post(
            url,
            data=raw,
            headers={"content-type": "application/json", "x-request-id": ex.request_id},
        ) as reply:
            content_type = reply.headers.get("content-type", "application/json")
            if ex.request.stream and reply.status == 200 and "event-stream" in content_type:
                await relay_stream(rt, ex, reply, send, record_usage)
            else:
                await relay_whole(rt, ex, reply, content_type, send, record_usage)
            ok = reply.status < 500 and not ex.upstream_broke
    except TimeoutError:
        raise ApiError(
            ErrorCode.UPSTREAM_TIMEOUT,
            f"the model server did not answer within {rt.config.upstream_timeout_s} s",
        ) from None
    except (aiohttp.ClientError, OSError) as error:
        if ex.status:  # the reply had started: nothing more can be said to the client
            return
        if not isinstance(error, ReplicaIdentityRefused):  # that one is logged once, where found
            log.warning("request %s to %s failed: %s", ex.request_id, replica.url, error)
        raise ApiError(
            ErrorCode.BACKEND_UNAVAILABLE,
            f"model `{ex.request.model}` is unavailable: its server did not answer",
            retry_after_s=5,
        ) from None
    finally:
        pool.done(replica, ok or ex.client_gone)


#: The path each endpoint is forwarded to: the same path the client used.
_PATHS = {endpoint: path for path, endpoint in ENDPOINT_PATHS.items()}


def _refusal(refusal: Refused, budget_throttle: str | None = None) -> ApiError:
    limit = refusal.limit
    if limit.scope.startswith(BUDGET_SCOPE):
        retry_after = retry_after_header(refusal)
        return ApiError(
            ErrorCode.BUDGET_THROTTLED,
            f"{budget_throttle or 'a budget throttles these requests'}; retry after {retry_after} s",
            retry_after_s=int(retry_after),
        )
    who = "this API key" if limit.scope.startswith("key:") else "your organization"
    if refusal.never:
        return ApiError(
            ErrorCode.OVER_LIMIT_ALWAYS,
            f"this request needs more than {who}'s whole {limit.kind} limit ({limit.amount}); "
            "lower max_completion_tokens (or max_tokens), n, or the prompt",
            param="max_completion_tokens",
        )
    retry_after = retry_after_header(refusal)
    return ApiError(
        ErrorCode.RATE_LIMITED,
        f"rate limit reached for {who}: {limit.kind} {limit.amount}; retry after {retry_after} s",
        retry_after_s=int(retry_after),
    )


def record_usage(rt: GatewayRuntime, ex: Exchange) -> bool:
    """Write the request's usage record once (the first call that succeeds wins) and count it in
    the metrics. False when the spool refused it: the record is logged whole, so it is not lost."""
    if ex.recorded:
        return True
    tenant = ex.caller.tenant
    status = ex.status or 500
    latency_s = now_s() - ex.started_s
    billed = ex.billable
    prompt_tokens, completion_tokens = ex.billed_tokens()
    timing = ex.timing
    record = UsageRecord(
        request_id=ex.request_id,
        tenant=tenant,
        key_prefix=ex.caller.key_prefix,
        model=ex.request.model,
        endpoint=str(ex.request.endpoint),
        status=status,
        prompt_tokens=prompt_tokens if billed else 0,
        completion_tokens=completion_tokens if billed else 0,
        latency_s=latency_s,
        started_at=ex.started_at,
        stream=ex.request.stream,
        queue_wait_s=ex.queue_wait_s,
        ttft_s=timing.ttft_s if timing is not None else None,
        itl_s=timing.mean_itl_s if timing is not None else None,
    )
    try:
        rt.spool.append(record)
    except OSError as error:
        log.error(
            "the usage spool refused a record (%s); the record: %s",
            error,
            orjson.dumps(record.to_json_dict()).decode(),
        )
        return False
    ex.recorded = True
    metrics.requests_series(tenant, status).inc()
    series = metrics.tenant_series(tenant)
    series.latency.observe(latency_s)
    if billed:
        series.prompt_tokens.inc(record.prompt_tokens)
        series.completion_tokens.inc(record.completion_tokens)
    return True
