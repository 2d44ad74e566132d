"""The root of gpuplex.yaml: fleet, tenants, pricing, policy."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field, StrictInt

from gpuplex.core.spec.fields import Money, SpecModel
from gpuplex.core.spec.fleet import FleetSpec
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.core.spec.runtime import HostSpec
from gpuplex.core.spec.tenants import TenantSpec


class PlacementPolicy(StrEnum):
    BINPACK = "binpack"  # fill used GPUs first: fewer GPUs, whole GPUs left free for big work
    SPREAD = "spread"  # use the emptiest GPU: less contention, more GPUs in use


class PricingSpec(SpecModel):
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code.")
    gpu_hour: dict[str, Annotated[Money, Field(ge=0)]] = Field(
        default_factory=dict, description="Price of one whole GPU-hour per catalog model."
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
