"""The price book: the spec's `pricing:` made into prices per metered dimension.

- A whole GPU: gpu_hour of its model, per GPU-hour.
- A MIG slice: mig_hour of its model and profile, per instance-hour; by default gpu_hour x the
  profile's compute slices / the GPU's compute slices (a 3g slice of an H100: 3/7 of gpu_hour), so
  seven 1g slices cost exactly one GPU.
- An MPS or time-slice share: gpu_hour x share_multiplier of its mode, per GPU-hour of its share
  (its gpu_seconds already hold the share).
- Tokens: tokens_per_million of the served model, prompt and completion.
A model without a gpu_hour is unpriced: its lines cost 0 and are listed as unpriced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from gpuplex.core.catalog import gpu_model
from gpuplex.core.meter import (
    COMPLETION_TOKENS,
    GPU_SECONDS,
    INSTANCE_SECONDS,
    PROMPT_TOKENS,
    parse_allocation_dimension,
)
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.document import ChargebackMethod, IdleRule, PricingSpec

#: hybrid_allocation_percent when the spec leaves it out.
DEFAULT_HYBRID_ALLOCATION_PERCENT = 50

GPU_HOUR = "gpu_hour"
INSTANCE_HOUR = "instance_hour"
MILLION_TOKENS = "million_tokens"


@dataclass(frozen=True, slots=True)
class Rate:
    """How one dimension is charged: which metric, in which unit, at what price per unit."""

    metric: str  # the MeterLine metric the price applies to
    unit: str  # gpu_hour, instance_hour or million_tokens
    unit_price: Decimal


@dataclass(frozen=True, slots=True)
class PriceBook:
    currency: str
    method: ChargebackMethod
    idle: IdleRule
    hybrid_allocation_percent: int
    gpu_hour: Mapping[str, Decimal]
    mig_hour: Mapping[tuple[str, str], Decimal]  # (model, profile) -> explicit price
    share_multiplier: Mapping[Mode, Decimal]
    tokens_per_million: Mapping[tuple[str, str], Decimal]  # (model name, metric) -> price

    @classmethod
    def from_pricing(cls, pricing: PricingSpec) -> PriceBook:
        percent = pricing.hybrid_allocation_percent
        tokens: dict[tuple[str, str], Decimal] = {}
        for name, price in pricing.tokens_per_million.items():
            tokens[name, PROMPT_TOKENS] = price.prompt
            tokens[name, COMPLETION_TOKENS] = price.completion
        return cls(
            currency=pricing.currency,
            method=pricing.method,
            idle=pricing.idle,
            hybrid_allocation_percent=DEFAULT_HYBRID_ALLOCATION_PERCENT
            if percent is None
            else percent,
            gpu_hour=dict(pricing.gpu_hour),
            mig_hour={
                (model, profile): price
                for model, profiles in pricing.mig_hour.items()
                for profile, price in profiles.items()
            },
            share_multiplier={
                Mode.MPS: pricing.share_multiplier.mps,
                Mode.TIMESLICE: pricing.share_multiplier.timeslice,
            },
            tokens_per_million=tokens,
        )

    @property
    def allocation_weight(self) -> Decimal:
        """The part of the charge that follows allocation (1, 0, or the hybrid percent / 100)."""
        if self.method is ChargebackMethod.ALLOCATION:
            return Decimal(1)
        if self.method is ChargebackMethod.USAGE:
            return Decimal(0)
        return Decimal(self.hybrid_allocation_percent) / 100

    def allocation_rate(self, dimension: str) -> Rate | None:
        """The rate of an allocation dimension (`H100-80GB/mig:3g.40gb`); None when unpriced."""
        model_name, mode, profile = parse_allocation_dimension(dimension)
        if mode is Mode.MIG and profile is not None:
            explicit = self.mig_hour.get((model_name, profile))
            if explicit is not None:
                return Rate(INSTANCE_SECONDS, INSTANCE_HOUR, explicit)
            fraction = mig_compute_fraction(model_name, profile)
            whole = self.gpu_hour.get(model_name)
            if fraction is None or whole is None:
                return None
            return Rate(INSTANCE_SECONDS, INSTANCE_HOUR, whole * fraction)
        whole = self.gpu_hour.get(model_name)
        if whole is None:
            return None
        return Rate(GPU_SECONDS, GPU_HOUR, whole * self.share_multiplier.get(mode, Decimal(1)))

    def busy_rate(self, gpu_model_name: str) -> Rate | None:
        """The rate of measured busy GPU time on a model; None when unpriced or unknown ('')."""
        whole = self.gpu_hour.get(gpu_model_name)
        return None if whole is None else Rate("busy_gpu_seconds", GPU_HOUR, whole)

    def token_rate(self, model_name: str, metric: str) -> Rate | None:
        price = self.tokens_per_million.get((model_name, metric))
        return None if price is None else Rate(metric, MILLION_TOKENS, price)


def mig_compute_fraction(model_name: str, profile_name: str) -> Decimal | None:
    """A MIG profile's compute slices over its GPU's (3/7 for 3g on an H100), from the catalog."""
    model = gpu_model(model_name)
    if model is None or model.mig is None:
        return None
    profile = model.mig.profile(profile_name)
    if profile is None:
        return None
    return Decimal(profile.compute_slices) / Decimal(model.mig.compute_slices)
