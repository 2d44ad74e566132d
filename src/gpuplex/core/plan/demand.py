"""What each replica asks for, resolved per GPU model: MIG profile, memory, thread %, compute %."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplex.core.catalog import GpuModel, MigProfile
from gpuplex.core.plan.model import Mode, replica_label
from gpuplex.core.spec import TenantSpec

Key = tuple[str, str, int]  # tenant, workload, replica


@dataclass(frozen=True, slots=True)
class Unit:
    """One replica to place."""

    key: Key
    tenant: TenantSpec
    mode: Mode
    pool: str | None
    gpu_count: int  # whole GPUs (dedicated); 1 otherwise
    memory_mib: int | None  # asked memory (share, or minimum for a dedicated GPU / MIG profile)
    compute_percent: int | None
    mig_profile: str | None  # explicit profile name
    gpu_model: str | None  # only GPUs of this catalog model

    @property
    def label(self) -> str:
        return replica_label(*self.key)

    @property
    def priority(self) -> int:
        return self.tenant.priority


@dataclass(frozen=True, slots=True)
class Sized:
    """A unit's demand on one GPU model."""

    memory_mib: int
    compute_percent: int
    thread_percent: int | None = None
    profile: MigProfile | None = None

    @property
    def profile_name(self) -> str:
        return self.profile.name if self.profile else "(no profile)"


DemandKey = tuple[Mode, int, int | None, int | None, str | None, str | None]


def demand_key(unit: Unit) -> DemandKey:
    """All that `size_on` reads of a unit: units with equal keys size alike on every model."""
    return (
        unit.mode,
        unit.gpu_count,
        unit.memory_mib,
        unit.compute_percent,
        unit.mig_profile,
        unit.gpu_model,
    )


def size_on(unit: Unit, model: GpuModel) -> Sized | None:
    """The unit's demand on a GPU of `model`, or None if it can never fit that model."""
    if unit.gpu_model is not None and model.name != unit.gpu_model:
        return None
    if unit.mode is Mode.DEDICATED:
        if unit.memory_mib is not None and unit.memory_mib > model.memory_mib:
            return None
        return Sized(model.memory_mib * unit.gpu_count, 100 * unit.gpu_count)
    if unit.mode is Mode.MIG:
        profile = mig_profile_on(unit, model)
        if profile is None or model.mig is None:
            return None
        compute = round(100 * profile.compute_slices / model.mig.compute_slices)
        return Sized(profile.memory_mib, compute, profile=profile)
    memory = unit.memory_mib or 0
    if memory > model.memory_mib:
        return None
    if unit.mode is Mode.MPS:
        threads = unit.compute_percent or max(1, math.ceil(100 * memory / model.memory_mib))
        return Sized(memory, threads, thread_percent=threads)
    return Sized(memory, unit.compute_percent or 0)


def mig_profile_on(unit: Unit, model: GpuModel) -> MigProfile | None:
    """The explicit profile if the model has it; else the smallest base profile that holds the
    asked memory and compute."""
    geometry = model.mig
    if geometry is None or (unit.gpu_model is not None and model.name != unit.gpu_model):
        return None
    if unit.mig_profile is not None:
        return geometry.profile(unit.mig_profile)
    fitting = [
        p
        for p in geometry.profiles
        if not p.is_variant
        and p.memory_mib >= (unit.memory_mib or 0)
        and 100 * p.compute_slices >= (unit.compute_percent or 0) * geometry.compute_slices
    ]
    return min(fitting, key=lambda p: (p.memory_slices, p.compute_slices), default=None)


def memory_mib_of(gib: float) -> int:
    return math.ceil(gib * 1024)
