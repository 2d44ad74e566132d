"""Values of metering: a window of time, one metered quantity (MeterLine), and the exact arithmetic
on time they share. Seconds are Decimal, counted from whole microseconds, so sums never drift."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Literal

from gpuplex.errors import MeterInputError

Source = Literal["allocation", "measured", "gateway"]

#: The tenant name of fleet-wide lines (capacity). Tenant names are DNS labels, never empty.
FLEET_TENANT = ""

# Metric names, as stored in usage_rollups.metric.
GPU_SECONDS = "gpu_seconds"  # allocation: seconds x compute_percent / 100
INSTANCE_SECONDS = "instance_seconds"  # allocation: seconds a replica held its place
FLEET_GPU_SECONDS = "fleet_gpu_seconds"  # allocation, FLEET_TENANT: every GPU of the plan x seconds
MEMORY_MIB_SECONDS = "memory_mib_seconds"  # measured: MiB held x seconds
BUSY_GPU_SECONDS = "busy_gpu_seconds"  # measured: seconds x utilization_percent / 100
REQUESTS = "requests"  # gateway: every request, whatever its status
FAILED_REQUESTS = "failed_requests"  # gateway: requests answered with status >= 400
PROMPT_TOKENS = "prompt_tokens"
COMPLETION_TOKENS = "completion_tokens"

_MICROSECONDS_PER_SECOND = Decimal(1_000_000)


def require_utc(value: datetime, name: str) -> datetime:
    """`value` as UTC; a naive datetime is refused (its zone is a guess)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise MeterInputError(f"{name} {value.isoformat()} has no timezone: give a UTC datetime")
    return value.astimezone(UTC)


def utc_span(
    start: datetime, end: datetime | None, names: tuple[str, str], what: str
) -> tuple[datetime, datetime | None]:
    """[start, end) as UTC (`end` None: still open); MeterInputError when either has no zone
    (`names` name them) or `what` ends before it starts."""
    start = require_utc(start, names[0])
    if end is None:
        return start, None
    end = require_utc(end, names[1])
    if end < start:
        raise MeterInputError(
            f"{what} ends ({end.isoformat()}) before it starts ({start.isoformat()})"
        )
    return start, end


def seconds_of(delta: timedelta) -> Decimal:
    """Exact seconds of a timedelta (a float's total_seconds() would round)."""
    microseconds = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return Decimal(microseconds) / _MICROSECONDS_PER_SECOND


@dataclass(frozen=True, slots=True)
class MeterWindow:
    """The half-open interval [start, end) a roll-up or a statement covers."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        start = require_utc(self.start, "window start")
        end = require_utc(self.end, "window end")
        if end <= start:
            raise MeterInputError(
                f"window ends ({end.isoformat()}) at or before it starts ({start.isoformat()}): "
                "give an end after the start"
            )
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "end", end)

    @property
    def seconds(self) -> Decimal:
        return seconds_of(self.end - self.start)

    def overlap_seconds(self, start: datetime, end: datetime | None) -> Decimal:
        """Seconds of [start, end) inside the window; `end` None means open-ended."""
        lower = max(start, self.start)
        upper = self.end if end is None else min(end, self.end)
        return seconds_of(upper - lower) if upper > lower else Decimal(0)

    def contains(self, at: datetime) -> bool:
        return self.start <= at < self.end


def month_window(period: str) -> MeterWindow:
    """The calendar month `YYYY-MM` in UTC, e.g. month_window("2025-03")."""
    year_text, _, month_text = period.partition("-")
    if not (len(year_text) == 4 and len(month_text) == 2 and (year_text + month_text).isdigit()):
        raise MeterInputError(
            f"period {period!r} is not a month: write it as YYYY-MM, e.g. 2025-03"
        )
    year, month = int(year_text), int(month_text)
    if not 1 <= month <= 12:
        raise MeterInputError(f"period {period!r} has no month {month}: use 01 to 12")
    if not 1 <= year <= 9998:
        raise MeterInputError(f"period {period!r}: the year must be 0001 to 9998")
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return MeterWindow(start, end)


def month_of(at: datetime) -> str:
    """The `YYYY-MM` period that contains `at` (in UTC)."""
    return require_utc(at, "time").strftime("%Y-%m")


@dataclass(frozen=True, slots=True, order=True)
class MeterLine:
    """One metered quantity of one tenant in one window. The window is the caller's: the store keeps
    it beside the line (usage_rollups.window_start/window_end)."""

    tenant: str
    source: Source
    metric: str
    dimension: str  # GPU model + mode/profile, GPU model, or served model name; '' when none
    quantity: Decimal


def summed_lines(lines: Iterable[MeterLine]) -> list[MeterLine]:
    """Lines of the same tenant, source, metric and dimension added into one, sorted: a roll-up
    keeps one line for each."""
    totals: dict[tuple[str, Source, str, str], Decimal] = {}
    for line in lines:
        key = (line.tenant, line.source, line.metric, line.dimension)
        totals[key] = totals.get(key, Decimal(0)) + line.quantity
    return sorted(
        MeterLine(tenant, source, metric, dimension, quantity)
        for (tenant, source, metric, dimension), quantity in totals.items()
        if quantity != 0
    )


def lines_from_totals(
    totals: dict[tuple[str, str, str], Decimal], source: Source
) -> list[MeterLine]:
    """(tenant, metric, dimension) -> quantity as sorted lines, zero quantities left out."""
    return sorted(
        MeterLine(tenant, source, metric, dimension, quantity)
        for (tenant, metric, dimension), quantity in totals.items()
        if quantity != 0
    )
