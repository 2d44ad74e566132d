"""Job metering: what each job held on the GPUs, from its runs. Pure.

A job is billed like a replica: each run (from the moment the job was placed until it left the GPU:
requeued or finished) counts, for the part of it inside the window, `instance_seconds` and
`gpu_seconds` (those seconds times its share of a GPU), under the same allocation dimension as a
replica on that placement (`H100-80GB/mig:3g.40gb`, `H100-80GB/mps`, ...). A run still open counts
until the end of the window. The lines are of source `allocation`, beside the replicas' lines.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from gpuplex.core.meter.allocation import placement_dimension
from gpuplex.core.meter.model import (
    GPU_SECONDS,
    INSTANCE_SECONDS,
    MeterLine,
    MeterWindow,
    lines_from_totals,
    utc_span,
)
from gpuplex.core.plan.model import Placement
from gpuplex.errors import MeterInputError


@dataclass(frozen=True, slots=True)
class JobRunInterval:
    """One run of a job: what it held (`dimension`, `gpu_share` GPUs) during
    [started_at, ended_at)."""

    job_id: str
    tenant: str
    dimension: str  # allocation_dimension of its placement
    gpu_share: Decimal
    started_at: datetime
    ended_at: datetime | None = None  # None: it still holds its place

    def __post_init__(self) -> None:
        start, end = utc_span(
            self.started_at, self.ended_at, ("run start", "run end"), f"job {self.job_id}: its run"
        )
        object.__setattr__(self, "started_at", start)
        object.__setattr__(self, "ended_at", end)
        if not self.gpu_share.is_finite() or self.gpu_share < 0:
            raise MeterInputError(
                f"job {self.job_id}: GPU share {self.gpu_share} is not a number of GPUs >= 0"
            )

    @classmethod
    def of_placement(
        cls,
        job_id: str,
        tenant: str,
        placement: Placement,
        gpu_share: Decimal,
        started_at: datetime,
        ended_at: datetime | None = None,
    ) -> JobRunInterval:
        return cls(job_id, tenant, placement_dimension(placement), gpu_share, started_at, ended_at)


@dataclass(frozen=True, slots=True, order=True)
class JobUsage:
    """What one job held in one dimension inside a window, over all its runs there."""

    tenant: str
    job_id: str
    dimension: str
    gpu_seconds: Decimal
    instance_seconds: Decimal


def job_usage(runs: Iterable[JobRunInterval], window: MeterWindow) -> list[JobUsage]:
    """Per tenant, job and dimension: the seconds its runs held inside the window, and those
    seconds times their share of a GPU. Jobs that held nothing there are left out; sorted."""
    gpu: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    instance: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for run in runs:
        seconds = window.overlap_seconds(run.started_at, run.ended_at)
        if seconds == 0:
            continue
        key = (run.tenant, run.job_id, run.dimension)
        instance[key] += seconds
        gpu[key] += seconds * run.gpu_share
    return sorted(
        JobUsage(tenant, job_id, dimension, gpu[tenant, job_id, dimension], seconds)
        for (tenant, job_id, dimension), seconds in instance.items()
    )


def job_allocation_lines(runs: Iterable[JobRunInterval], window: MeterWindow) -> list[MeterLine]:
    """Per tenant and dimension: gpu_seconds and instance_seconds its jobs held inside the
    window, as `allocation` lines (add them to the replicas' with core.meter.summed_lines)."""
    totals: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for usage in job_usage(runs, window):
        totals[usage.tenant, GPU_SECONDS, usage.dimension] += usage.gpu_seconds
        totals[usage.tenant, INSTANCE_SECONDS, usage.dimension] += usage.instance_seconds
    return lines_from_totals(totals, "allocation")
