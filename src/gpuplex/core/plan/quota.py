"""Admission against tenant quotas, counted on what a replica really gets on the chosen GPU model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import TenantSpec


@dataclass(slots=True)
class TenantUsage:
    gpus: int = 0
    memory_mib: int = 0
    compute_percent: int = 0
    mig: Counter[str] = field(default_factory=Counter)


class QuotaLedger:
    def __init__(self, tenants: dict[str, TenantSpec]) -> None:
        self.usage = {name: TenantUsage() for name in tenants}

    def problem(self, unit: Unit, sized: Sized) -> str | None:
        """Why placing this demand would break the tenant's quota, or None."""
        quota = unit.tenant.quota
        used = self.usage[unit.tenant.name]
        gpus = unit.gpu_count if unit.mode is Mode.DEDICATED else 0
        if quota.gpus is not None and used.gpus + gpus > quota.gpus:
            return f"quota gpus: would hold {used.gpus + gpus} whole GPUs, quota {quota.gpus}"
        if quota.gpu_memory_gib is not None:
            limit_mib = quota.gpu_memory_gib * 1024
            if used.memory_mib + sized.memory_mib > limit_mib:
                return (
                    f"quota gpu_memory_gib: would hold {(used.memory_mib + sized.memory_mib) / 1024:.1f}"
                    f" GiB, quota {quota.gpu_memory_gib:g}"
                )
        compute = used.compute_percent + sized.compute_percent
        if quota.compute_percent is not None and compute > quota.compute_percent:
            return f"quota compute_percent: would hold {compute}%, quota {quota.compute_percent}%"
        if sized.profile is not None and sized.profile.name in quota.mig:
            limit = quota.mig[sized.profile.name]
            if used.mig[sized.profile.name] + 1 > limit:
                return f"quota mig {sized.profile.name}: would hold {used.mig[sized.profile.name] + 1}, quota {limit}"
        return None

    def add(self, unit: Unit, sized: Sized, sign: int = 1) -> None:
        used = self.usage[unit.tenant.name]
        used.gpus += sign * (unit.gpu_count if unit.mode is Mode.DEDICATED else 0)
        used.memory_mib += sign * sized.memory_mib
        used.compute_percent += sign * sized.compute_percent
        if sized.profile is not None:
            used.mig[sized.profile.name] += sign

    def remove(self, unit: Unit, sized: Sized) -> None:
        self.add(unit, sized, sign=-1)
