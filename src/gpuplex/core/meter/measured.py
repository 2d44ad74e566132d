"""Measured metering: what each tenant's replicas actually used, from GPU samples (NVML, DCGM, sim).

Samples are integrated step-wise. A sample holds from its time until the next sample of the same
replica on the same GPU, but for at most `max_gap_s`: a sampler that stopped does not bill forever.
Each held stretch is clipped to the window, so adjacent windows add up to their union as long as each
call is given every sample that can reach into its window (those from `start - max_gap_s` on).

- `memory_mib_seconds`: memory_used_mib x seconds held.
- `busy_gpu_seconds`: seconds held x utilization_percent / 100, where utilization_percent is the part
  of one whole GPU the replica kept busy. A sample without utilization (a MIG slice NVML cannot
  measure) adds no busy seconds: unknown is not busy.

The dimension is the sample's GPU model where the sampler knows it, else ''.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import groupby

from gpuplex.core.meter.model import (
    BUSY_GPU_SECONDS,
    MEMORY_MIB_SECONDS,
    MeterLine,
    MeterWindow,
    lines_from_totals,
    require_utc,
)
from gpuplex.errors import MeterInputError

#: How long one sample counts when no later sample of its replica follows.
DEFAULT_MAX_GAP_S = 60.0

_HUNDRED = Decimal(100)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """What one replica held on one GPU at one moment (a gpu_samples row)."""

    tenant: str
    workload: str
    replica: int
    node: str
    gpu_index: int
    at: datetime  # timezone-aware
    memory_used_mib: int
    utilization_percent: float | None = None
    gpu_model: str | None = None  # the catalog name, e.g. "H100-80GB", where known

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", require_utc(self.at, "sample time"))
        if self.memory_used_mib < 0:
            raise MeterInputError(f"sample memory_used_mib {self.memory_used_mib} is negative")
        utilization = self.utilization_percent
        if utilization is not None and not 0 <= utilization <= 100:
            raise MeterInputError(f"sample utilization_percent {utilization} is not within 0-100")

    @property
    def series(self) -> tuple[str, str, int, str, int]:
        """The samples that follow each other: one replica on one GPU."""
        return (self.tenant, self.workload, self.replica, self.node, self.gpu_index)


def _sort_key(sample: GpuSample) -> tuple[object, ...]:
    utilization = -1.0 if sample.utilization_percent is None else sample.utilization_percent
    return (*sample.series, sample.at, sample.memory_used_mib, utilization, sample.gpu_model or "")


def measured_lines(
    samples: Sequence[GpuSample], window: MeterWindow, *, max_gap_s: float = DEFAULT_MAX_GAP_S
) -> list[MeterLine]:
    """Per tenant and GPU model: memory_mib_seconds and busy_gpu_seconds inside the window."""
    if not max_gap_s > 0:
        raise MeterInputError(f"max_gap_s {max_gap_s} must be above 0")
    max_gap = timedelta(seconds=max_gap_s)
    totals: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    ordered = sorted(samples, key=_sort_key)
    for _, group in groupby(ordered, key=lambda s: s.series):
        series = list(group)
        for sample, following in zip(series, [*series[1:], None], strict=True):
            until = sample.at + max_gap
            if following is not None:
                until = min(until, following.at)
            seconds = window.overlap_seconds(sample.at, until)
            if seconds == 0:
                continue
            dimension = sample.gpu_model or ""
            totals[sample.tenant, MEMORY_MIB_SECONDS, dimension] += seconds * sample.memory_used_mib
            if sample.utilization_percent is not None:
                busy = Decimal(repr(sample.utilization_percent)) / _HUNDRED
                totals[sample.tenant, BUSY_GPU_SECONDS, dimension] += seconds * busy
    return lines_from_totals(totals, "measured")
