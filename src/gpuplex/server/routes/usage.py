"""Usage (the rolled-up meter readings), roll-ups on demand, and chargeback statements."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse
from pydantic import AwareDatetime, BaseModel

from gpuplex.core.access import Permission
from gpuplex.core.meter import MeterWindow, month_window
from gpuplex.core.report.render import (
    fleet_statement_csv,
    fleet_statement_json,
    statement_csv,
    statement_json,
)
from gpuplex.errors import ErrorCode, MeterInputError
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Current, Rollups, TheClock, TheMetering
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.server.times import checked_time
from gpuplex.store.rollups import RollupRepository

router = APIRouter(tags=["usage"], responses=ERROR_RESPONSES)
MAX_RANGE = timedelta(days=400)
#: A roll-up request is answered while the caller waits: a day of one-minute windows at most.
MAX_ROLLUP_WINDOWS = 1440
SourceName = Literal["allocation", "measured", "gateway"]
Period = Annotated[str, Query(pattern=r"^\d{4}-\d{2}$", description="A month: YYYY-MM (UTC).")]


class UsagePoint(BaseModel):
    tenant: str  # "" for the fleet's capacity lines
    start: datetime  # the bucket's start
    end: datetime
    source: str
    metric: str
    dimension: str
    quantity: Decimal


class UsageReply(BaseModel):
    tenant: str | None
    start: datetime
    end: datetime
    bucket_s: int
    points: list[UsagePoint]


class RollupRequest(RequestModel):
    start: AwareDatetime
    end: AwareDatetime


class RollupReply(BaseModel):
    windows: int
    rows: int
    window_s: int


def _range(start: datetime, end: datetime) -> MeterWindow:
    start, end = checked_time(start, "start"), checked_time(end, "end")
    if end <= start or end - start > MAX_RANGE:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            f"end: must be after start and at most {MAX_RANGE.days} days later",
            field="end",
        )
    return MeterWindow(start, end)


def _points(
    rollups: RollupRepository,
    tenant: str | None,
    window: MeterWindow,
    bucket_s: int,
    source: str | None,
    metric: str | None,
) -> list[UsagePoint]:
    """The roll-up rows, summed into buckets of `bucket_s` (from the range's start)."""
    sums: dict[tuple[str, datetime, str, str, str], Decimal] = {}
    for row in rollups.query(tenant, window.start, window.end, source, metric):
        if row.tenant == "" and tenant is not None:
            continue
        offset = int((row.window_start - window.start).total_seconds()) // bucket_s * bucket_s
        bucket = window.start + timedelta(seconds=offset)
        key = (row.tenant, bucket, row.source, row.metric, row.dimension)
        sums[key] = sums.get(key, Decimal(0)) + row.quantity
    return [
        UsagePoint(
            tenant=name,
            start=bucket,
            end=bucket + timedelta(seconds=bucket_s),
            source=src,
            metric=met,
            dimension=dim,
            quantity=quantity,
        )
        for (name, bucket, src, met, dim), quantity in sorted(sums.items())
    ]


Start = Annotated[AwareDatetime, Query(description="Range start (ISO 8601 with a timezone).")]
End = Annotated[AwareDatetime, Query(description="Range end, exclusive.")]
Bucket = Annotated[int, Query(ge=60, le=31 * 86400, description="Seconds per point.")]
SourceFilter = Annotated[SourceName | None, Query()]
MetricFilter = Annotated[str | None, Query(max_length=64)]


@router.get("/tenants/{tenant}/usage", response_model=UsageReply)
def tenant_usage(
    tenant: str,
    principal: CurrentPrincipal,
    current: Current,
    rollups: Rollups,
    start: Start,
    end: End,
    bucket_s: Bucket = 3600,
    source: SourceFilter = None,
    metric: MetricFilter = None,
) -> UsageReply:
    """One tenant's metered usage in [start, end): GPU-seconds allocated and busy, memory,
    requests and tokens, summed per bucket."""
    require(principal, Permission.USAGE_READ, tenant)
    applied_tenant(current, tenant)
    window = _range(start, end)
    points = _points(rollups, tenant, window, bucket_s, source, metric)
    return UsageReply(tenant=tenant, start=start, end=end, bucket_s=bucket_s, points=points)


@router.get("/usage", response_model=UsageReply)
def fleet_usage(
    principal: CurrentPrincipal,
    rollups: Rollups,
    start: Start,
    end: End,
    bucket_s: Bucket = 3600,
    source: SourceFilter = None,
    metric: MetricFilter = None,
) -> UsageReply:
    """Every tenant's usage, and the fleet's capacity (tenant \"\"), per bucket."""
    require(principal, Permission.FLEET_READ)
    window = _range(start, end)
    points = _points(rollups, None, window, bucket_s, source, metric)
    return UsageReply(tenant=None, start=start, end=end, bucket_s=bucket_s, points=points)


@router.post("/meter/rollup", response_model=RollupReply)
def roll_up(
    body: RollupRequest, principal: CurrentPrincipal, metering: TheMetering, clock: TheClock
) -> RollupReply:
    """Recompute the roll-up windows that [start, end) touches. Idempotent: a window's rows are
    replaced, so rerunning never double-counts."""
    require(principal, Permission.METER_WRITE)
    window = _range(body.start, body.end)
    if window.end > clock.utc_now():
        raise ApiProblem(ErrorCode.INVALID_REQUEST, "end: must not be in the future", field="end")
    window_s = metering.window_s
    if (window.end - window.start).total_seconds() > MAX_ROLLUP_WINDOWS * window_s:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            f"end: one call rolls up at most {MAX_ROLLUP_WINDOWS} windows of {window_s} s; "
            "split the range (the server catches up on its own as time passes)",
            field="end",
        )
    result = metering.roll_up_range(window.start, window.end)
    return RollupReply(windows=result.windows, rows=result.rows, window_s=metering.window_s)


def _statement_response(body: dict[str, Any] | str, fmt: str, name: str) -> Any:
    if fmt == "csv":
        assert isinstance(body, str)
        return PlainTextResponse(
            body,
            media_type="text/csv",
            headers={"content-disposition": f'attachment; filename="{name}.csv"'},
        )
    return body


@router.get(
    "/tenants/{tenant}/statements/{period}",
    responses={200: {"content": {"text/csv": {}}, "description": "The statement."}},
)
def tenant_statement(
    tenant: str,
    period: str,
    principal: CurrentPrincipal,
    current: Current,
    metering: TheMetering,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Any:
    """One tenant's chargeback statement for a month (YYYY-MM), from the roll-ups so far; its line
    items add up to its total, and `jobs` says what each of its jobs held and cost (part of
    those lines)."""
    require(principal, Permission.STATEMENT_READ, tenant)
    applied, _ = applied_tenant(current, tenant)
    fleet = metering.statement_with_jobs(_month(period), applied, tenant)
    statement = fleet.statement_for(tenant)
    if statement is None:
        raise ApiProblem(ErrorCode.NOT_FOUND, f"no statement for {tenant!r} in {period}")
    if format == "csv":
        return _statement_response(statement_csv(statement), "csv", f"{tenant}-{period}")
    return statement_json(statement)


@router.get(
    "/statements/{period}",
    responses={200: {"content": {"text/csv": {}}, "description": "The fleet statement."}},
)
def fleet_statement(
    period: str,
    principal: CurrentPrincipal,
    current: Current,
    metering: TheMetering,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> Any:
    """Every tenant's statement for a month, the idle capacity and the fleet's cost: the tenants'
    totals plus idle equal the fleet's cost."""
    require(principal, Permission.FLEET_READ)
    applied = current.get()
    if applied is None:
        raise ApiProblem(ErrorCode.NOT_FOUND, "no spec applied yet: nothing to charge")
    fleet = metering.statement_with_jobs(_month(period), applied)
    if format == "csv":
        return _statement_response(fleet_statement_csv(fleet), "csv", f"fleet-{period}")
    return fleet_statement_json(fleet)


def _month(period: str) -> MeterWindow:
    try:
        return month_window(period)
    except MeterInputError as error:
        raise ApiProblem(ErrorCode.INVALID_REQUEST, f"period: {error}", field="period") from None
