"""Which kinds of GPU capacity a tenant's queued jobs may hold: the ways of sharing a GPU its
isolation allows, as `check_request` allows them for a job on one server. Pure.

- `isolation: dedicated` -> whole GPUs; `mig` -> MIG slices; `mps` -> MPS shares; `timeslice` ->
  time-sliced shares: chosen by hand, so exactly that.
- `isolation: auto` -> what its requirement allows: `hard` and `strong` -> whole GPUs or MIG
  slices (hardware isolation); `moderate` -> also MPS shares; `shared` -> also time-sliced ones.

On Kubernetes this decides which Kueue flavors a tenant's ClusterQueue offers and which GPU
resources the admission policy lets its queued Jobs ask for.
"""

from __future__ import annotations

from enum import StrEnum

from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX
from gpuplex.core.spec.tenants import Isolation, Requirement, TenantSpec


class Sharing(StrEnum):
    WHOLE = "whole GPUs"
    MIG = "MIG slices"
    MPS = "MPS shares"
    TIMESLICE = "time-sliced shares"


_BY_ISOLATION = {
    Isolation.DEDICATED: frozenset({Sharing.WHOLE}),
    Isolation.MIG: frozenset({Sharing.MIG}),
    Isolation.MPS: frozenset({Sharing.MPS}),
    Isolation.TIMESLICE: frozenset({Sharing.TIMESLICE}),
}
_HARDWARE = frozenset({Sharing.WHOLE, Sharing.MIG})
_BY_REQUIREMENT = {
    Requirement.HARD: _HARDWARE,
    Requirement.STRONG: _HARDWARE,
    Requirement.MODERATE: _HARDWARE | {Sharing.MPS},
    Requirement.SHARED: _HARDWARE | {Sharing.MPS, Sharing.TIMESLICE},
}


def allowed_sharing(tenant: TenantSpec) -> frozenset[Sharing]:
    """The ways of sharing a GPU the tenant's queued jobs may use (module docstring)."""
    if tenant.isolation is not Isolation.AUTO:
        return _BY_ISOLATION[tenant.isolation]
    return _BY_REQUIREMENT[tenant.requirement_in_force]


def kind_allowed(kind: str, allowed: frozenset[Sharing]) -> bool:
    """Whether a queue kind (`gpus`, `mig:<profile>`, `gpu_memory_gib`, `compute_percent`) is one
    the allowed ways of sharing hold."""
    if kind == GPUS:
        return Sharing.WHOLE in allowed
    if kind.startswith(MIG_PREFIX):
        return Sharing.MIG in allowed
    if kind in (GPU_MEMORY_GIB, COMPUTE_PERCENT):
        return bool({Sharing.MPS, Sharing.TIMESLICE} & allowed)
    return False


def sharing_words(tenant: TenantSpec) -> str:
    """`isolation mig allows MIG slices only`: why a tenant's queue offers what it offers."""
    allowed = allowed_sharing(tenant)
    ways = [way.value for way in Sharing if way in allowed]
    reason = (
        f"isolation {tenant.isolation}"
        if tenant.isolation is not Isolation.AUTO
        else f"requirement {tenant.requirement_in_force}"
    )
    only = " only" if len(ways) == 1 else ""
    return f"tenant {tenant.name}'s {reason} allows {' and '.join(ways)}{only}"
