"""Metering, pure: plan revisions, job runs, GPU samples and gateway usage records in, MeterLines
out.

Each roll-up covers one MeterWindow and returns sorted lines; zero quantities are left out. Rolling
up the same inputs twice gives the same lines; two adjacent windows add up to their union.
See docs/chargeback.md.
"""

from __future__ import annotations

from gpuplex.core.meter.allocation import (
    PlanInterval,
    allocation_dimension,
    allocation_lines,
    fleet_gpu_seconds,
    gpu_share,
    parse_allocation_dimension,
    placement_dimension,
    placement_gpu_share,
)
from gpuplex.core.meter.gateway import gateway_lines
from gpuplex.core.meter.jobs import (
    JobRunInterval,
    JobUsage,
    job_allocation_lines,
    job_usage,
)
from gpuplex.core.meter.measured import DEFAULT_MAX_GAP_S, measured_lines
from gpuplex.core.meter.model import (
    BUSY_GPU_SECONDS,
    COMPLETION_TOKENS,
    FAILED_REQUESTS,
    FLEET_GPU_SECONDS,
    FLEET_TENANT,
    GPU_SECONDS,
    INSTANCE_SECONDS,
    MEMORY_MIB_SECONDS,
    PROMPT_TOKENS,
    REQUESTS,
    MeterLine,
    MeterWindow,
    Source,
    month_of,
    month_window,
    seconds_of,
    summed_lines,
)
from gpuplex.core.meter.riders import (
    ServerKey,
    SharedServer,
    server_usage,
    shared_measured_lines,
    shared_servers,
    split_exactly,
    token_shares,
)
from gpuplex.core.meter.samples import SAMPLE_SOURCES, GpuSample, SampleSource

__all__ = [
    "BUSY_GPU_SECONDS",
    "COMPLETION_TOKENS",
    "DEFAULT_MAX_GAP_S",
    "FAILED_REQUESTS",
    "FLEET_GPU_SECONDS",
    "FLEET_TENANT",
    "GPU_SECONDS",
    "INSTANCE_SECONDS",
    "MEMORY_MIB_SECONDS",
    "PROMPT_TOKENS",
    "REQUESTS",
    "SAMPLE_SOURCES",
    "GpuSample",
    "JobRunInterval",
    "JobUsage",
    "MeterLine",
    "MeterWindow",
    "PlanInterval",
    "SampleSource",
    "ServerKey",
    "SharedServer",
    "Source",
    "allocation_dimension",
    "allocation_lines",
    "fleet_gpu_seconds",
    "gateway_lines",
    "gpu_share",
    "job_allocation_lines",
    "job_usage",
    "measured_lines",
    "month_of",
    "month_window",
    "parse_allocation_dimension",
    "placement_dimension",
    "placement_gpu_share",
    "seconds_of",
    "server_usage",
    "shared_measured_lines",
    "shared_servers",
    "split_exactly",
    "summed_lines",
    "token_shares",
]
