"""Where GPU samples enter the store, from `gpuplex up`'s sampler and the DCGM scraper alike: a
batch is checked against the GPUs' memory in the plan in force (core/meter/sample_check.py) and
stored without the GPUs whose samples cannot be true. Those are logged, one line per GPU and
moment, and counted in `gpuplex_gpu_samples_refused_total{reason="above_capacity"}`: never
clamped, since a clamped figure would bill a guess."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuplex.core.meter import GpuSample
from gpuplex.core.meter.sample_check import within_capacity
from gpuplex.server.context import ServerContext
from gpuplex.server.metrics.sample_metrics import SAMPLE_STATS, SampleIntakeStats

log = logging.getLogger("gpuplex.server.samples")


def store_samples(
    ctx: ServerContext, samples: Sequence[GpuSample], stats: SampleIntakeStats = SAMPLE_STATS
) -> int:
    """Store the batch less its refused GPUs; how many samples were stored."""
    applied = ctx.current.get()
    capacity = {(g.node, g.index): g.memory_mib for g in applied.plan.gpus} if applied else {}
    checked = within_capacity(samples, capacity)
    for gpu in checked.refused:
        log.warning("GPU samples refused, not stored: %s", gpu.describe())
    if checked.refused:
        stats.refused("above_capacity", checked.refused_samples)
    return ctx.samples.append(checked.kept)
