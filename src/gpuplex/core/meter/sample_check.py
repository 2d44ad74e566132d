"""Samples that cannot be true: the memory the replicas on one GPU hold at one moment can never
exceed the GPU's memory. A sampler that says otherwise has put memory on the wrong device (a
multi-GPU replica's memory on its first GPU) or misread it; its samples are refused, not clamped,
since which of them is wrong cannot be told, and a clamped figure would bill a guess.

A batch is checked per GPU and moment: when the samples of one GPU at one moment add up to more
than its memory, all of them are refused; the batch's other samples are kept. A GPU the capacity
map does not know (not in the plan in force) cannot be checked, and its samples are kept."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuplex.core.meter.samples import GpuSample

GpuKey = tuple[str, int]  # node, GPU index


@dataclass(frozen=True, slots=True)
class RefusedGpu:
    """The samples of one GPU at one moment, refused together."""

    node: str
    gpu_index: int
    at: datetime
    used_mib: int  # what they add up to
    capacity_mib: int
    samples: tuple[GpuSample, ...]

    def describe(self) -> str:
        replicas = ", ".join(
            f"{s.tenant}/{s.workload}#{s.replica} {s.memory_used_mib} MiB" for s in self.samples
        )
        return (
            f"node {self.node} GPU {self.gpu_index} at {self.at.isoformat()}: samples add up to "
            f"{self.used_mib} MiB on a {self.capacity_mib} MiB GPU ({replicas})"
        )


@dataclass(frozen=True, slots=True)
class CheckedSamples:
    kept: list[GpuSample]
    refused: list[RefusedGpu]

    @property
    def refused_samples(self) -> int:
        return sum(len(gpu.samples) for gpu in self.refused)


def within_capacity(
    samples: Sequence[GpuSample], capacity_mib: Mapping[GpuKey, int]
) -> CheckedSamples:
    """The batch split into the samples to store (in their order) and the GPUs refused."""
    groups: dict[tuple[str, int, datetime], list[GpuSample]] = {}
    for sample in samples:
        groups.setdefault((sample.node, sample.gpu_index, sample.at), []).append(sample)
    refused: list[RefusedGpu] = []
    refused_keys: set[tuple[str, int, datetime]] = set()
    for key, group in groups.items():
        node, index, at = key
        capacity = capacity_mib.get((node, index))
        used = sum(s.memory_used_mib for s in group)
        if capacity is not None and used > capacity:
            refused.append(RefusedGpu(node, index, at, used, capacity, tuple(group)))
            refused_keys.add(key)
    kept = [s for s in samples if (s.node, s.gpu_index, s.at) not in refused_keys]
    return CheckedSamples(kept, refused)
