"""Exact charges, before any rounding: MeterLines x the price book -> priced lines per tenant, the
fleet's capacity cost, and what of it no tenant pays for (idle)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from gpuplex.core.meter import (
    BUSY_GPU_SECONDS,
    COMPLETION_TOKENS,
    FLEET_GPU_SECONDS,
    FLEET_TENANT,
    PROMPT_TOKENS,
    MeterLine,
)
from gpuplex.core.report.prices import GPU_HOUR, PriceBook, Rate
from gpuplex.core.report.rounding import hours
from gpuplex.core.spec.document import ChargebackMethod

_MILLION = Decimal(1_000_000)
#: The description of a tenant's allocation lines (under hybrid: with its weight, ` x 50%`).
ALLOCATION_LINE = "GPU allocation"
_TOKEN_DESCRIPTIONS = {PROMPT_TOKENS: "Prompt tokens", COMPLETION_TOKENS: "Completion tokens"}


@dataclass(frozen=True, slots=True)
class ExactLine:
    """A line item at full precision: amount == quantity x unit_price exactly."""

    description: str
    dimension: str
    quantity: Decimal
    unit: str
    unit_price: Decimal

    @property
    def amount(self) -> Decimal:
        return self.quantity * self.unit_price


@dataclass(slots=True)
class TenantCharges:
    gpu: list[ExactLine] = field(default_factory=list)
    tokens: list[ExactLine] = field(default_factory=list)

    @property
    def gpu_amount(self) -> Decimal:
        return sum((line.amount for line in self.gpu), Decimal(0))


@dataclass(frozen=True, slots=True)
class Charges:
    tenants: dict[str, TenantCharges]
    capacity: list[ExactLine]  # per GPU model: every GPU of the fleet x the period
    unpriced: list[str]  # dimensions with metered use but no price

    @property
    def fleet_cost(self) -> Decimal:
        return sum((line.amount for line in self.capacity), Decimal(0))

    @property
    def idle(self) -> Decimal:
        tenants = sum((c.gpu_amount for c in self.tenants.values()), Decimal(0))
        return self.fleet_cost - tenants


def _weighted(description: str, book: PriceBook, percent: int) -> str:
    if book.method is not ChargebackMethod.HYBRID:
        return description
    return f"{description} x {percent}%"


def _priced(
    line: MeterLine, rate: Rate | None, description: str, weight: Decimal, unpriced: set[str]
) -> ExactLine | None:
    if rate is None:
        unpriced.add(f"{line.source}:{line.dimension}")
        return None
    if rate.metric != line.metric:
        return None
    divisor = _MILLION if line.source == "gateway" else Decimal(3600)
    return ExactLine(
        description, line.dimension, line.quantity / divisor, rate.unit, rate.unit_price * weight
    )


def compute_charges(
    lines: Iterable[MeterLine], book: PriceBook, tenants: Sequence[str] = ()
) -> Charges:
    """Price every line. `tenants` adds statements for tenants without any line."""
    by_tenant: dict[str, TenantCharges] = {name: TenantCharges() for name in tenants}
    capacity_seconds: dict[str, Decimal] = defaultdict(Decimal)
    unpriced: set[str] = set()
    allocation_weight = book.allocation_weight
    usage_weight = 1 - allocation_weight
    percent = book.hybrid_allocation_percent
    allocation = _weighted(ALLOCATION_LINE, book, percent)
    usage = _weighted("GPU busy time", book, 100 - percent)
    for line in sorted(lines):
        if line.tenant == FLEET_TENANT:
            if line.metric == FLEET_GPU_SECONDS:
                capacity_seconds[line.dimension] += line.quantity
            continue
        charges = by_tenant.setdefault(line.tenant, TenantCharges())
        priced: ExactLine | None = None
        if line.source == "allocation" and allocation_weight > 0:
            rate = book.allocation_rate(line.dimension)
            priced = _priced(line, rate, allocation, allocation_weight, unpriced)
        elif line.source == "measured" and usage_weight > 0 and line.metric == BUSY_GPU_SECONDS:
            rate = book.busy_rate(line.dimension)
            priced = _priced(line, rate, usage, usage_weight, unpriced)
        elif line.source == "gateway" and line.metric in _TOKEN_DESCRIPTIONS:
            if book.tokens_per_million:
                rate = book.token_rate(line.dimension, line.metric)
                description = _TOKEN_DESCRIPTIONS[line.metric]
                priced = _priced(line, rate, description, Decimal(1), unpriced)
            if priced is not None:
                charges.tokens.append(priced)
            continue
        if priced is not None:
            charges.gpu.append(priced)
    for charges in by_tenant.values():
        charges.tokens.sort(key=lambda line: (line.dimension, line.description != "Prompt tokens"))
    capacity = []
    for model, seconds in sorted(capacity_seconds.items()):
        price = book.gpu_hour.get(model)
        if price is None:
            unpriced.add(f"capacity:{model}")
        capacity.append(
            ExactLine("GPU capacity", model, hours(seconds), GPU_HOUR, price or Decimal(0))
        )
    return Charges(dict(sorted(by_tenant.items())), capacity, sorted(unpriced))
