"""Statements: the exact charges rounded to cents so that nothing is lost or made up.

1. The fleet cost (every GPU x the period x gpu_hour) is rounded to cents once.
2. Every tenant's GPU line, every idle share (rule `spread`) and the idle left over are rounded
   together by largest remainder to add up to that fleet cost exactly.
3. Each tenant's token lines are rounded by largest remainder to the tenant's token total.
So each statement's total is the sum of its lines, and
    sum(tenant totals) + idle == fleet_cost + tokens_total        (tokens_total is 0 without
token prices: then the tenants and idle add up to the fleet cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, localcontext

from gpuplex.core.meter import MeterLine, MeterWindow
from gpuplex.core.report.charges import Charges, ExactLine, compute_charges
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.rounding import MONEY_CONTEXT, apportion_cents, for_display, to_cents
from gpuplex.core.spec.document import ChargebackMethod, IdleRule

IDLE_SHARE = "Idle capacity share"
IDLE_SHARE_UNIT = "share"


@dataclass(frozen=True, slots=True)
class LineItem:
    description: str
    dimension: str
    quantity: Decimal  # six decimals: hours, million tokens, or a share of idle
    unit: str  # gpu_hour, instance_hour, million_tokens, share
    unit_price: Decimal  # six decimals; the amount comes from the exact price
    amount: Decimal  # cents
    exact_amount: Decimal  # before rounding: what jobs' amounts are shared out against


@dataclass(frozen=True, slots=True)
class JobCharge:
    """One job's part of a tenant's allocation lines, in one dimension: what its runs held in the
    period and what that costs at the price of that dimension (core.report.job_charges). Already
    in the statement's lines and total, never added to them; its cents are shared out of its
    line's (`with_job_charges`)."""

    job_id: str
    name: str | None
    dimension: str
    gpu_seconds: Decimal
    instance_seconds: Decimal
    quantity: Decimal  # six decimals, in `unit`: the hours the price applies to
    unit: str  # gpu_hour or instance_hour
    unit_price: Decimal  # six decimals; the amount comes from the exact price
    amount: Decimal  # cents: its part of its line's cents (largest remainder)
    exact_amount: Decimal  # before rounding


@dataclass(frozen=True, slots=True)
class Statement:
    tenant: str
    period_start: datetime
    period_end: datetime
    currency: str
    lines: list[LineItem]
    total: Decimal  # == sum of the lines' amounts
    jobs: tuple[JobCharge, ...] = ()  # the tenant's jobs, part of `lines`: a breakdown


@dataclass(frozen=True, slots=True)
class FleetStatement:
    period_start: datetime
    period_end: datetime
    currency: str
    method: ChargebackMethod
    idle_rule: IdleRule
    tenants: list[Statement]  # sorted by tenant
    capacity: list[LineItem]  # per GPU model; amounts add up to fleet_cost
    fleet_cost: Decimal
    idle: Decimal  # the platform's: capacity no tenant paid for (negative: prices over-recover)
    tokens_total: Decimal  # token charges of all tenants (not part of the fleet cost)
    unpriced: list[str]  # `source:dimension` metered but without a price (charged 0)

    def statement_for(self, tenant: str) -> Statement | None:
        for statement in self.tenants:
            if statement.tenant == tenant:
                return statement
        return None


def _item(line: ExactLine, amount: Decimal) -> LineItem:
    return LineItem(
        line.description,
        line.dimension,
        for_display(line.quantity),
        line.unit,
        for_display(line.unit_price),
        amount,
        line.amount,
    )


def _with_idle_shares(charges: Charges, rule: IdleRule) -> tuple[dict[str, list[ExactLine]], bool]:
    """Each tenant's GPU lines, plus its idle capacity share under rule spread; and whether idle
    was spread. It stays with the platform when no tenant has a GPU charge, and when it is negative
    (tenants' prices add up to more than the capacity cost)."""
    gpu_lines = {tenant: list(c.gpu) for tenant, c in charges.tenants.items()}
    charged = sum((c.gpu_amount for c in charges.tenants.values()), Decimal(0))
    idle = charges.idle
    if rule is not IdleRule.SPREAD or charged <= 0 or idle < 0:
        return gpu_lines, False  # a surplus (prices above capacity cost) is not handed back
    if idle > 0:
        for tenant, tenant_charges in charges.tenants.items():
            if tenant_charges.gpu_amount > 0:
                share = tenant_charges.gpu_amount / charged
                gpu_lines[tenant].append(ExactLine(IDLE_SHARE, "", share, IDLE_SHARE_UNIT, idle))
    return gpu_lines, True


def build_fleet_statement(
    lines: Iterable[MeterLine],
    book: PriceBook,
    period: MeterWindow,
    *,
    tenants: Sequence[str] = (),
) -> FleetStatement:
    """The statements of one period from its MeterLines (allocation, fleet capacity, measured,
    gateway; any mix). `tenants` adds an empty statement for tenants without any line."""
    with localcontext(MONEY_CONTEXT):
        charges = compute_charges(lines, book, tenants)
        fleet_cost = to_cents(charges.fleet_cost)
        capacity_amounts = apportion_cents([line.amount for line in charges.capacity], fleet_cost)
        gpu_lines, spread = _with_idle_shares(charges, book.idle)
        flat = [line.amount for tenant_lines in gpu_lines.values() for line in tenant_lines]
        if spread:  # the shares hold all of idle: the tenants' lines make up the fleet cost
            rounded = apportion_cents(flat, fleet_cost)
            idle = Decimal("0.00")
        else:
            exact_idle = charges.fleet_cost - sum(flat, Decimal(0))
            rounded = apportion_cents([*flat, exact_idle], fleet_cost)
            idle = rounded.pop()
        statements = []
        tokens_total = Decimal("0.00")
        position = 0
        for tenant, tenant_lines in gpu_lines.items():
            amounts = rounded[position : position + len(tenant_lines)]
            position += len(tenant_lines)
            items = [
                _item(line, amount) for line, amount in zip(tenant_lines, amounts, strict=True)
            ]
            tokens = charges.tenants[tenant].tokens
            token_total = to_cents(sum((line.amount for line in tokens), Decimal(0)))
            token_amounts = apportion_cents([line.amount for line in tokens], token_total)
            items += [
                _item(line, amount) for line, amount in zip(tokens, token_amounts, strict=True)
            ]
            tokens_total += token_total
            total = sum((item.amount for item in items), Decimal("0.00"))
            statements.append(
                Statement(tenant, period.start, period.end, book.currency, items, total)
            )
        return FleetStatement(
            period_start=period.start,
            period_end=period.end,
            currency=book.currency,
            method=book.method,
            idle_rule=book.idle,
            tenants=statements,
            capacity=[
                _item(line, amount)
                for line, amount in zip(charges.capacity, capacity_amounts, strict=True)
            ],
            fleet_cost=fleet_cost,
            idle=idle,
            tokens_total=tokens_total,
            unpriced=charges.unpriced,
        )
