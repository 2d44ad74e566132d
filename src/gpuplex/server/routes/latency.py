"""A tenant's latency per model, for the dashboard: the wait in the fair queue, time to first token
and inter-token latency (50th and 95th percentiles over its recent requests), from the gateway's
usage records. Prometheus has the same numbers per gap and per request as histograms
(`gpuplex_gateway_*_seconds`), but only the operator may read the gateway's `/metrics`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AwareDatetime, BaseModel

from gpuplex.core.access import Permission
from gpuplex.core.serve.latency_summary import ModelLatency, Percentiles, latency_by_model
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Current, TheClock, Usage
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.server.times import checked_time

router = APIRouter(tags=["usage"], responses=ERROR_RESPONSES)
#: The range when none is given: the last hour.
DEFAULT_RANGE = timedelta(hours=1)
MAX_RANGE = timedelta(days=31)
#: At most this many of the newest requests in the range are summed up (the reply says so).
MAX_REQUESTS = 20_000


class PercentilesReply(BaseModel):
    p50_s: float
    p95_s: float
    count: int  # requests this percentile is over


class ModelLatencyReply(BaseModel):
    model: str
    requests: int
    queue_wait: PercentilesReply | None
    time_to_first_token: PercentilesReply | None
    inter_token_latency: PercentilesReply | None


class LatencyReply(BaseModel):
    tenant: str
    start: datetime
    end: datetime
    requests: int
    truncated: bool  # more than MAX_REQUESTS in the range: the newest were summed up
    models: list[ModelLatencyReply]


def _percentiles(value: Percentiles | None) -> PercentilesReply | None:
    if value is None:
        return None
    return PercentilesReply(p50_s=value.p50_s, p95_s=value.p95_s, count=value.count)


def _model(latency: ModelLatency) -> ModelLatencyReply:
    return ModelLatencyReply(
        model=latency.model,
        requests=latency.requests,
        queue_wait=_percentiles(latency.queue_wait),
        time_to_first_token=_percentiles(latency.time_to_first_token),
        inter_token_latency=_percentiles(latency.inter_token_latency),
    )


@router.get("/tenants/{tenant}/latency", response_model=LatencyReply)
def tenant_latency(
    tenant: str,
    principal: CurrentPrincipal,
    current: Current,
    usage: Usage,
    clock: TheClock,
    start: Annotated[
        AwareDatetime | None, Query(description="Default: an hour before end.")
    ] = None,
    end: Annotated[AwareDatetime | None, Query(description="Exclusive; default: now.")] = None,
) -> LatencyReply:
    """Per model the tenant called: requests that reached the fair queue in [start, end), and the
    50th and 95th percentiles of their queue wait, time to first token (streamed requests, queue
    wait included) and mean inter-token latency (streamed requests)."""
    require(principal, Permission.USAGE_READ, tenant)
    applied_tenant(current, tenant)
    until = checked_time(end, "end") if end is not None else clock.utc_now()
    since = checked_time(start, "start") if start is not None else until - DEFAULT_RANGE
    if until <= since or until - since > MAX_RANGE:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            f"end: must be after start and at most {MAX_RANGE.days} days later",
            field="end",
        )
    samples = usage.latency_samples(tenant, since, until, MAX_REQUESTS + 1)
    truncated = len(samples) > MAX_REQUESTS
    models = latency_by_model(samples[:MAX_REQUESTS])
    return LatencyReply(
        tenant=tenant,
        start=since,
        end=until,
        requests=sum(m.requests for m in models),
        truncated=truncated,
        models=[_model(m) for m in models],
    )
