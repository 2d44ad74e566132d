"""Each job's part of its tenant's statement. Pure.

A job's GPU time is metered into its tenant's allocation lines (core.meter.jobs), so the
statement's lines and total already hold it. The breakdown says which job it was: per job and
dimension, the GPU-seconds and instance-seconds its runs held in the period, and their cost at the
allocation price of that dimension (the same price as a replica there: per GPU-hour of its share,
or per instance-hour of a MIG slice; times the allocation weight under the hybrid method, 0 under
the usage method), rounded to the cent on its own. A dimension without a price costs 0, as it does
on the statement's lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from decimal import Decimal, localcontext

from gpuplex.core.meter import GPU_SECONDS, JobUsage
from gpuplex.core.report.prices import GPU_HOUR, PriceBook
from gpuplex.core.report.rounding import MONEY_CONTEXT, for_display, hours, to_cents
from gpuplex.core.report.statement import FleetStatement, JobCharge


def job_charge(usage: JobUsage, name: str | None, book: PriceBook) -> JobCharge:
    """What one job's usage in one dimension costs at the allocation price of that dimension."""
    with localcontext(MONEY_CONTEXT):
        rate = book.allocation_rate(usage.dimension)
        if rate is None:
            unit, unit_price, seconds = GPU_HOUR, Decimal(0), usage.gpu_seconds
        else:
            unit, unit_price = rate.unit, rate.unit_price * book.allocation_weight
            seconds = usage.gpu_seconds if rate.metric == GPU_SECONDS else usage.instance_seconds
        quantity = hours(seconds)
        return JobCharge(
            job_id=usage.job_id,
            name=name,
            dimension=usage.dimension,
            gpu_seconds=usage.gpu_seconds,
            instance_seconds=usage.instance_seconds,
            quantity=for_display(quantity),
            unit=unit,
            unit_price=for_display(unit_price),
            amount=to_cents(quantity * unit_price),
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
    """`fleet` with each tenant's statement listing its jobs' charges (the rest unchanged)."""
    tenants = [replace(s, jobs=charges.get(s.tenant, ())) for s in fleet.tenants]
    return replace(fleet, tenants=tenants)
