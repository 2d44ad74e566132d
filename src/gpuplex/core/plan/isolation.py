"""Which isolation mode each workload gets, with the reason kept (docs/isolation.md, "How auto chooses").

requirement  hard      -> MIG on a MIG-capable GPU, else a dedicated GPU
             strong    -> MIG or a dedicated GPU (premium tier: dedicated)
             moderate  -> an MPS share with thread % and pinned-memory limits
             shared    -> time-slicing, memory still accounted
A request for whole GPUs is always dedicated; an explicit MIG profile is always MIG.
With no requirement, the tier decides: premium and standard -> strong, free -> moderate.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import Isolation, Requirement, TenantSpec, Tier, WorkloadSpec


@dataclass(frozen=True, slots=True)
class ModeChoice:
    mode: Mode
    reason: str


def choose_mode(
    tenant: TenantSpec, workload: WorkloadSpec, *, mig_available: bool, whole_available: bool = True
) -> ModeChoice:
    """`mig_available`: some candidate GPU of this workload can run MIG (capable, not mig: off).
    `whole_available`: some candidate GPU is not mig: on (so dedicated, MPS, time-slicing run)."""
    choice = _by_rules(tenant, workload, mig_available=mig_available)
    auto = tenant.isolation is Isolation.AUTO and workload.gpu and workload.gpu.count is None
    if auto and choice.mode is not Mode.MIG and not whole_available and mig_available:
        return ModeChoice(
            Mode.MIG, f"{choice.reason}; but every GPU in the pool has mig: on, so a MIG slice"
        )
    return choice


def _by_rules(tenant: TenantSpec, workload: WorkloadSpec, *, mig_available: bool) -> ModeChoice:
    request = workload.gpu
    if request is not None and request.count is not None:
        return ModeChoice(Mode.DEDICATED, f"asks for {request.count} whole GPU(s)")
    if request is not None and request.mig_profile is not None:
        return ModeChoice(Mode.MIG, f"asks for MIG profile {request.mig_profile}")
    if tenant.isolation is not Isolation.AUTO:
        return ModeChoice(Mode(tenant.isolation.value), f"tenant isolation is {tenant.isolation}")
    requirement = tenant.requirement_in_force
    if tenant.regulated:
        source = "regulated tenant"
    elif tenant.requirement is not None:
        source = f"requirement {requirement}"
    else:
        source = f"{tenant.tier} tier implies requirement {requirement}"
    if requirement in (Requirement.HARD, Requirement.STRONG):
        if tenant.tier is Tier.PREMIUM:
            return ModeChoice(Mode.DEDICATED, f"{source}; premium tier gets dedicated GPUs")
        if mig_available:
            return ModeChoice(Mode.MIG, f"{source}: hardware isolation by MIG")
        return ModeChoice(
            Mode.DEDICATED, f"{source}: no MIG-capable GPU in the pool, so a dedicated GPU"
        )
    if requirement is Requirement.MODERATE:
        return ModeChoice(Mode.MPS, f"{source}: MPS share with thread and memory limits")
    return ModeChoice(Mode.TIMESLICE, f"{source}: time-slicing, memory accounted")
