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
from datetime import timedelta
from decimal import Decimal
from itertools import groupby

from gpuplex.core.meter.model import (
    BUSY_GPU_SECONDS,
    MEMORY_MIB_SECONDS,
    MeterLine,
    MeterWindow,
    lines_from_totals,
)
from gpuplex.core.meter.samples import GpuSample
from gpuplex.errors import MeterInputError

#: How long one sample counts when no later sample of its replica follows.
DEFAULT_MAX_GAP_S = 60.0

_HUNDRED = Decimal(100)


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
