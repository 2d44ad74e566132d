"""The VRAM watchdog's rule: a share with no hard memory enforcement (time-slicing) that uses more
GPU memory than planned, by more than the tolerance, is stopped before it pushes neighbours into OOM.
MIG slices are enforced by hardware, MPS clients by CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and a dedicated
GPU has no neighbour to hurt."""

from __future__ import annotations

from gpuplex.core.apply.actions import VramStop
from gpuplex.core.apply.model import Binding, WorkloadRecord
from gpuplex.core.plan.model import Mode

UNENFORCED_MODES = frozenset({Mode.TIMESLICE})


def memory_limit_mib(binding: Binding, tolerance_percent: int) -> int | None:
    """The most GPU memory the watchdog allows this binding, or None where something else enforces it."""
    if binding.mode not in UNENFORCED_MODES:
        return None
    return binding.memory_mib + binding.memory_mib * tolerance_percent // 100


def vram_violation(
    record: WorkloadRecord, observed_mib: int, tolerance_percent: int
) -> VramStop | None:
    limit = memory_limit_mib(record.desired.binding, tolerance_percent)
    if limit is None or observed_mib <= limit:
        return None
    return VramStop(
        label=record.label,
        tenant=record.desired.tenant,
        workload=record.desired.workload,
        planned_mib=record.desired.binding.memory_mib,
        observed_mib=observed_mib,
        limit_mib=limit,
    )
