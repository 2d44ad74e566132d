"""Tenants: isolation requirement, tier, priority, quotas, rate limits, budget, co-tenancy rules."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictFloat, StrictInt

from gpuplex.core.spec.fields import DnsLabel, Money, SpecModel
from gpuplex.core.spec.kubernetes import NamespaceQuotaSpec
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.core.spec.workloads import WorkloadSpec


class Isolation(StrEnum):
    DEDICATED = "dedicated"
    MIG = "mig"
    MPS = "mps"
    TIMESLICE = "timeslice"
    AUTO = "auto"


class Requirement(StrEnum):
    """How strongly a tenant must be kept apart from others (used by isolation: auto)."""

    HARD = "hard"  # hardware isolation: MIG, else a dedicated GPU
    STRONG = "strong"  # MIG or dedicated
    MODERATE = "moderate"  # an MPS share with thread and memory limits
    SHARED = "shared"  # time-slicing, memory still accounted


class Tier(StrEnum):
    PREMIUM = "premium"
    STANDARD = "standard"
    FREE = "free"


class QuotaSpec(SpecModel):
    gpus: StrictInt | None = Field(default=None, ge=0, description="Whole (dedicated) GPUs.")
    gpu_memory_gib: StrictFloat | None = Field(default=None, ge=0)
    compute_percent: StrictInt | None = Field(
        default=None, ge=0, description="Sum of SM shares; a whole GPU counts 100."
    )
    mig: dict[str, Annotated[StrictInt, Field(ge=0)]] = Field(
        default_factory=dict, description="MIG slices per profile name."
    )


class TenantSpec(SpecModel):
    name: DnsLabel
    isolation: Isolation = Isolation.AUTO
    requirement: Requirement | None = Field(
        default=None, description="For isolation: auto. Defaults from the tier."
    )
    regulated: bool = Field(default=False, description="Implies requirement: hard.")
    tier: Tier = Tier.STANDARD
    priority: StrictInt = Field(default=0, ge=-1000, le=1000, description="Higher wins preemption.")
    weight: StrictInt = Field(
        default=1, ge=1, le=1000, description="Fair-share weight in the gateway."
    )
    quota: QuotaSpec = Field(default_factory=QuotaSpec)
    rate_limits: RateLimits = Field(default_factory=RateLimits)
    monthly_budget: Money | None = Field(default=None, ge=0)
    never_share_with: list[DnsLabel] = Field(
        default_factory=list, description="Tenants never placed on the same physical GPU."
    )
    exclusive_gpus: bool = Field(
        default=False, description="Never share a physical GPU with any other tenant."
    )
    unix_user: str | None = Field(
        default=None,
        pattern=r"^[a-z_][a-z0-9_-]{0,31}$",
        description=(
            "Run this tenant's processes as this existing Unix user (the host runtime needs "
            "root). Without it each tenant runs as a system user of its own that gpuplex makes; "
            "`root` is the explicit, warned-about opt-in to run it as root."
        ),
    )
    namespace_quota: NamespaceQuotaSpec | None = Field(
        default=None,
        description="On Kubernetes: this tenant's CPU, memory and storage quota (else kubernetes.namespace_quota).",
    )
    workloads: list[WorkloadSpec] = Field(default_factory=list)

    @property
    def effective_requirement(self) -> Requirement | None:
        """The stated requirement: regulated implies hard; else the explicit one (may be None)."""
        if self.regulated:
            return Requirement.HARD
        return self.requirement

    @property
    def requirement_in_force(self) -> Requirement:
        """The stated requirement, else the tier's default (premium and standard: strong,
        free: moderate). What `isolation: auto` decides by."""
        return self.effective_requirement or TIER_DEFAULT_REQUIREMENT[self.tier]

    @property
    def own_gpus_reason(self) -> str | None:
        """Why this tenant may never run inside another tenant's process, or None if it may."""
        if self.exclusive_gpus:
            return "exclusive_gpus"
        if self.isolation in (Isolation.DEDICATED, Isolation.MIG):
            return f"isolation {self.isolation}"
        strong = (Requirement.HARD, Requirement.STRONG)
        if self.isolation is Isolation.AUTO and self.requirement_in_force in strong:
            source = "" if self.effective_requirement else f", the {self.tier} tier's default"
            return f"isolation auto with requirement {self.requirement_in_force}{source}"
        return None


TIER_DEFAULT_REQUIREMENT = {
    Tier.PREMIUM: Requirement.STRONG,
    Tier.STANDARD: Requirement.STRONG,
    Tier.FREE: Requirement.MODERATE,
}
