"""Admission against tenant quotas, counted on what a replica really gets on the chosen GPU model.

A refusal names what counts against the quota: the tenant's workloads already held (replicas and
amount) and the replica that would go over, with what it asked when the grant is larger (a
memory request rounded up to a MIG profile or a whole GPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.model import Mode
from gpuplex.core.plural import counted
from gpuplex.core.spec import TenantSpec


@dataclass(slots=True)
class TenantUsage:
    gpus: int = 0
    memory_mib: int = 0
    compute_percent: int = 0
    mig: Counter[str] = field(default_factory=Counter)
    replicas: int = 0


class QuotaLedger:
    def __init__(self, tenants: dict[str, TenantSpec]) -> None:
        self.usage = {name: TenantUsage() for name in tenants}
        self.by_workload: dict[str, dict[str, TenantUsage]] = {name: {} for name in tenants}

    def problem(self, unit: Unit, sized: Sized) -> str | None:
        """Why placing this demand would break the tenant's quota, or None."""
        quota = unit.tenant.quota
        used = self.usage[unit.tenant.name]
        gpus = unit.gpu_count if unit.mode is Mode.DEDICATED else 0
        if quota.gpus is not None and used.gpus + gpus > quota.gpus:
            return f"quota gpus: would hold {used.gpus + gpus} whole GPUs, quota {quota.gpus}" + (
                self._who(unit, lambda u: _gpus(u.gpus) if u.gpus else None, _gpus(gpus))
            )
        if quota.gpu_memory_gib is not None:
            limit_mib = quota.gpu_memory_gib * 1024
            if used.memory_mib + sized.memory_mib > limit_mib:
                asked = unit.memory_mib
                more = f"{sized.memory_mib / 1024:.1f} GiB" + (
                    f" (asked {asked / 1024:g})" if asked and asked < sized.memory_mib else ""
                )
                return (
                    f"quota gpu_memory_gib: would hold {(used.memory_mib + sized.memory_mib) / 1024:.1f}"
                    f" GiB, quota {quota.gpu_memory_gib:g}"
                    + self._who(unit, lambda u: f"{u.memory_mib / 1024:.1f} GiB", more)
                )
        compute = used.compute_percent + sized.compute_percent
        if quota.compute_percent is not None and compute > quota.compute_percent:
            return (
                f"quota compute_percent: would hold {compute}%, quota {quota.compute_percent}%"
                + self._who(unit, lambda u: f"{u.compute_percent}%", f"{sized.compute_percent}%")
            )
        if sized.profile is not None and sized.profile.name in quota.mig:
            name = sized.profile.name
            limit, held = quota.mig[name], used.mig[name]
            if held + 1 > limit:
                return f"quota mig {name}: would hold {held + 1}, quota {limit}" + self._who(
                    unit,
                    lambda u: f"{u.mig[name]} x {name}" if u.mig[name] else None,
                    f"1 x {name}",
                )
        return None

    def _who(self, unit: Unit, amount: Callable[[TenantUsage], str | None], more: str) -> str:
        """`: chat 2 replicas hold 78.8 GiB, a replica of chat would add 39.4 GiB (asked 30)`."""
        held = []
        for workload, usage in sorted(self.by_workload[unit.tenant.name].items()):
            figure = amount(usage) if usage.replicas else None
            if figure is not None:
                replicas = counted(usage.replicas, "replica")
                held.append(
                    f"{workload} {replicas} {'holds' if usage.replicas == 1 else 'hold'} {figure}"
                )
        return f": {', '.join([*held, f'a replica of {unit.key[1]} would add {more}'])}"

    def add(self, unit: Unit, sized: Sized, sign: int = 1) -> None:
        tenant, workload, _ = unit.key
        workloads = self.by_workload[tenant]
        if workload not in workloads:
            workloads[workload] = TenantUsage()
        for used in (self.usage[tenant], workloads[workload]):
            used.gpus += sign * (unit.gpu_count if unit.mode is Mode.DEDICATED else 0)
            used.memory_mib += sign * sized.memory_mib
            used.compute_percent += sign * sized.compute_percent
            used.replicas += sign
            if sized.profile is not None:
                used.mig[sized.profile.name] += sign

    def remove(self, unit: Unit, sized: Sized) -> None:
        self.add(unit, sized, sign=-1)


def _gpus(count: int) -> str:
    return counted(count, "GPU")
