"""GpuSample: what one replica held on one GPU at one moment, as a sampler saw it (NVML, DCGM or the
simulator). The one type for it: samplers make it, the store keeps it (a gpu_samples row), metering
integrates it and the GPU map shows it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from gpuplex.core.meter.model import require_utc
from gpuplex.errors import MeterInputError

SampleSource = Literal["nvml", "sim", "dcgm"]
SAMPLE_SOURCES: tuple[SampleSource, ...] = get_args(SampleSource)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSample:
    tenant: str
    workload: str
    replica: int
    node: str
    gpu_index: int
    at: datetime  # timezone-aware; kept as UTC
    memory_used_mib: int
    utilization_percent: float | None = None  # None where the source cannot attribute it
    source: SampleSource
    gpu_uuid: str | None = None
    #: The catalog name, e.g. "H100-80GB", where known: metering fills it in from the plan (the
    #: store does not keep it).
    gpu_model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", require_utc(self.at, "sample time"))
        if self.source not in SAMPLE_SOURCES:
            raise MeterInputError(
                f"unknown sample source {self.source!r}: use {', '.join(SAMPLE_SOURCES)}"
            )
        if self.memory_used_mib < 0:
            raise MeterInputError(f"sample memory_used_mib {self.memory_used_mib} is negative")
        utilization = self.utilization_percent
        if utilization is not None and not 0 <= utilization <= 100:
            raise MeterInputError(f"sample utilization_percent {utilization} is not within 0-100")

    @property
    def series(self) -> tuple[str, str, int, str, int]:
        """The samples that follow each other: one replica on one GPU."""
        return (self.tenant, self.workload, self.replica, self.node, self.gpu_index)
