"""Each job's part of its tenant's statement. Pure.

A job's GPU time is metered into its tenant's allocation lines (core.meter.jobs), so the
statement's lines and total already hold it. The breakdown says which job it was: per job and
dimension, the GPU-seconds and instance-seconds its runs held in the period, and their cost at the
allocation price of that dimension (the same price as a replica there: per GPU-hour of its share,
or per instance-hour of a MIG slice; times the allocation weight under the hybrid method, 0 under
the usage method). A dimension without a price costs 0, as it does on the statement's lines.

**Rounding.** The jobs' cents come out of their line's, so they add up: per dimension, the exact
amounts of the jobs there and of the rest of the line (the line's exact amount less the jobs':
the tenant's replicas there) are rounded together by largest remainder to the line's amount
(`rounding.apportion_cents`: each rounded down, the missing cents one each to the largest
remainders). So the jobs' amounts plus the rest are the line's amount to the cent, each job is
within a cent of its exact amount, and a line that is all jobs is exactly the sum of its jobs'
amounts. A job in a dimension without a line (no price, or the usage method) is rounded on its
own (to 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal, localcontext

from gpuplex.core.meter import GPU_SECONDS, JobUsage
from gpuplex.core.report.charges import ALLOCATION_LINE
from gpuplex.core.report.prices import GPU_HOUR, PriceBook
from gpuplex.core.report.rounding import (
    MONEY_CONTEXT,
    apportion_cents,
    for_display,
    hours,
    to_cents,
)
from gpuplex.core.report.statement import FleetStatement, JobCharge, LineItem, Statement

#: Below this, what is left of a line after its jobs is arithmetic noise (hours are a division),
#: not a replica's money: the line is all jobs.
_NOISE = Decimal("1e-12")


def job_charge(usage: JobUsage, name: str | None, book: PriceBook) -> JobCharge:
    """What one job's usage in one dimension costs at the allocation price of that dimension,
    rounded on its own (`with_job_charges` shares its line's cents out instead)."""
    with localcontext(MONEY_CONTEXT):
        rate = book.allocation_rate(usage.dimension)
        if rate is None:
            unit, unit_price, seconds = GPU_HOUR, Decimal(0), usage.gpu_seconds
        else:
            unit, unit_price = rate.unit, rate.unit_price * book.allocation_weight
            seconds = usage.gpu_seconds if rate.metric == GPU_SECONDS else usage.instance_seconds
        quantity = hours(seconds)
        exact = quantity * unit_price
        return JobCharge(
            job_id=usage.job_id,
            name=name,
            dimension=usage.dimension,
            gpu_seconds=usage.gpu_seconds,
            instance_seconds=usage.instance_seconds,
            quantity=for_display(quantity),
            unit=unit,
            unit_price=for_display(unit_price),
            amount=to_cents(exact),
            exact_amount=exact,
        )


def job_charges(
    usages: Iterable[JobUsage], names: Mapping[str, str | None], book: PriceBook
) -> dict[str, tuple[JobCharge, ...]]:
    """Per tenant, its jobs' charges in the order of `usages` (sorted by job, then dimension);
    `names` maps a job id to its name."""
    by_tenant: dict[str, list[JobCharge]] = {}
    for usage in sorted(usages):
        charge = job_charge(usage, names.get(usage.job_id), book)
        by_tenant.setdefault(usage.tenant, []).append(charge)
    return {tenant: tuple(charges) for tenant, charges in by_tenant.items()}


def with_job_charges(
    fleet: FleetStatement, charges: Mapping[str, tuple[JobCharge, ...]]
) -> FleetStatement:
    """`fleet` with each tenant's statement listing its jobs' charges, their cents shared out of
    their lines' (see the module docstring; the lines and totals unchanged)."""
    tenants = [replace(s, jobs=_shared_out(s, charges.get(s.tenant, ()))) for s in fleet.tenants]
    return replace(fleet, tenants=tenants)


def _shared_out(statement: Statement, jobs: Sequence[JobCharge]) -> tuple[JobCharge, ...]:
    """`jobs` with amounts that, per dimension, add up with the rest of their line to the
    line's amount."""
    amounts: dict[int, Decimal] = {}
    for dimension in dict.fromkeys(job.dimension for job in jobs):
        line = _allocation_line(statement, dimension)
        if line is None:
            continue
        indices = [i for i, job in enumerate(jobs) if job.dimension == dimension]
        with localcontext(MONEY_CONTEXT):
            parts = [jobs[i].exact_amount for i in indices]
            rest = line.exact_amount - sum(parts, Decimal(0))
            if abs(rest) >= _NOISE:
                parts.append(rest)
            shared = apportion_cents(parts, line.amount)
        amounts.update(zip(indices, shared, strict=False))
    return tuple(
        replace(job, amount=amounts[i]) if i in amounts else job for i, job in enumerate(jobs)
    )


def _allocation_line(statement: Statement, dimension: str) -> LineItem | None:
    for line in statement.lines:
        if line.dimension == dimension and line.description.startswith(ALLOCATION_LINE):
            return line
    return None
