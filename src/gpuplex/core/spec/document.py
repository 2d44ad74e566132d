"""The root of gpuplex.yaml: fleet, tenants, pricing, policy."""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictInt

from gpuplex.core.spec.auth import AuthSpec
from gpuplex.core.spec.fields import Money, SpecModel
from gpuplex.core.spec.fleet import FleetSpec
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.core.spec.kubernetes import KubernetesSpec
from gpuplex.core.spec.queues import QueuesSpec
from gpuplex.core.spec.runtime import HostSpec
from gpuplex.core.spec.tenants import TenantSpec


class PlacementPolicy(StrEnum):
    BINPACK = "binpack"  # fill used GPUs first: fewer GPUs, whole GPUs left free for big work
    SPREAD = "spread"  # use the emptiest GPU: less contention, more GPUs in use
    # binpack, but a share (MPS, time-slice) goes where the GPU's fragmentation against the
    # plan's other shares grows least (fgd-balanced): fewer shares left with no GPU to fit
    FRAGMENTATION = "fragmentation"


class ChargebackMethod(StrEnum):
    ALLOCATION = "allocation"  # pay for what is reserved (plan placements), used or not
    USAGE = "usage"  # pay for measured busy GPU time (utilization-weighted samples)
    HYBRID = "hybrid"  # hybrid_allocation_percent of the allocation charge + the rest of usage


class IdleRule(StrEnum):
    ABSORB = "absorb"  # capacity no tenant pays for stays with the platform (a fleet line)
    SPREAD = "spread"  # shared by the tenants pro rata to their GPU charge


Price = Annotated[Money, Field(ge=0)]


class SharePriceSpec(SpecModel):
    """Multipliers on gpu_hour x share for GPUs shared without hardware isolation."""

    mps: Price = Field(default=Decimal(1), description="MPS share: gpu_hour x this x thread %.")
    timeslice: Price = Field(
        default=Decimal(1), description="Time-slice share: gpu_hour x this x share."
    )


class TokenPriceSpec(SpecModel):
    prompt: Price = Field(default=Decimal(0), description="Price per million prompt tokens.")
    completion: Price = Field(
        default=Decimal(0), description="Price per million completion tokens."
    )


class PricingSpec(SpecModel):
    """How usage becomes money (docs/chargeback.md)."""

    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code.")
    gpu_hour: dict[str, Price] = Field(
        default_factory=dict, description="Price of one whole GPU-hour per catalog model."
    )
    mig_hour: dict[str, dict[str, Price]] = Field(
        default_factory=dict,
        description="Price of one MIG instance-hour per model and profile; default gpu_hour x "
        "the profile's compute slices / the GPU's.",
    )
    share_multiplier: SharePriceSpec = Field(default_factory=SharePriceSpec)
    tokens_per_million: dict[str, TokenPriceSpec] = Field(
        default_factory=dict,
        description="Token prices per served model name; charged on top of GPU time.",
    )
    method: ChargebackMethod = Field(
        default=ChargebackMethod.ALLOCATION, description="allocation, usage or hybrid."
    )
    hybrid_allocation_percent: StrictInt | None = Field(
        default=None,
        ge=0,
        le=100,
        description="With method hybrid: the allocation charge's weight in percent (default 50).",
    )
    idle: IdleRule = Field(
        default=IdleRule.ABSORB, description="Who pays for unreserved capacity: absorb or spread."
    )


class PolicySpec(SpecModel):
    placement: PlacementPolicy = PlacementPolicy.BINPACK
    preemption: bool = Field(
        default=True, description="Higher-priority work may evict lower-priority work."
    )


class GpuplexSpec(SpecModel):
    """A whole gpuplex.yaml."""

    version: StrictInt = Field(default=1, ge=1, le=1, description="Spec format version; 1 today.")
    fleet: FleetSpec = Field(default_factory=FleetSpec)
    tenants: list[TenantSpec] = Field(default_factory=list)
    pricing: PricingSpec = Field(default_factory=PricingSpec)
    policy: PolicySpec = Field(default_factory=PolicySpec)
    host: HostSpec = Field(default_factory=HostSpec)
    gateway: GatewaySpec = Field(default_factory=GatewaySpec)
    kubernetes: KubernetesSpec = Field(default_factory=KubernetesSpec)
    queues: QueuesSpec = Field(
        default_factory=QueuesSpec,
        description="Organisation -> team -> tenant quota queues for jobs (none: no jobs).",
    )
    auth: AuthSpec = Field(
        default_factory=AuthSpec,
        description="Signing in with the company's identity provider (OpenID Connect).",
    )
