"""What one placement costs per hour under the spec's pricing, as `plan` and `explain` show it.

The price is the allocation charge chargeback.md describes, for one hour held: a MIG slice its
mig_hour (by default gpu_hour x its compute slices / the GPU's), a whole GPU or a share gpu_hour x
its share of a GPU (x share_multiplier for MPS and time-slicing). Without a gpu_hour for the
model there is no price, and the cost is said as the share of a GPU the placement takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gpuplex.core.catalog import gpu_model
from gpuplex.core.meter import INSTANCE_SECONDS
from gpuplex.core.meter.allocation import allocation_dimension, gpu_share
from gpuplex.core.plan.model import Mode, Placement, Plan
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.spec.document import PricingSpec

_CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class PlacementCost:
    gpu_share: Decimal  # GPUs held: 1 per whole GPU, compute slices / the GPU's for MIG
    share_text: str  # the same, as a person reads it: `7/7 of a GPU`, `0.20 of a GPU`
    price_per_hour: Decimal | None  # None: the pricing names no gpu_hour for the model
    currency: str

    def sentence(self) -> str:
        if self.price_per_hour is None:
            return f"{self.share_text}; no price (pricing has no gpu_hour for this GPU model)"
        return f"{self.price_per_hour.quantize(_CENT)} {self.currency}/h for {self.share_text}"

    def short(self) -> str:
        """For a table cell: the price per hour, else the share of a GPU."""
        if self.price_per_hour is None:
            return self.share_text
        return f"{self.price_per_hour.quantize(_CENT)} {self.currency}/h"


def placement_cost(placement: Placement, plan: Plan, pricing: PricingSpec) -> PlacementCost:
    share = gpu_share(placement, plan)
    share_text = _share_text(placement, share)
    profile = placement.mig.profile if placement.mig is not None else None
    dimension = allocation_dimension(placement.gpu_model, placement.mode, profile)
    rate = PriceBook.from_pricing(pricing).allocation_rate(dimension)
    if rate is None:
        price = None
    elif rate.metric == INSTANCE_SECONDS:
        price = rate.unit_price  # one instance-hour
    else:
        price = rate.unit_price * share
    return PlacementCost(share, share_text, price, pricing.currency)


def _share_text(placement: Placement, share: Decimal) -> str:
    model = gpu_model(placement.gpu_model)
    if placement.mig is not None and model is not None and model.mig is not None:
        profile = model.mig.profile(placement.mig.profile)
        if profile is not None:
            return f"{profile.compute_slices}/{model.mig.compute_slices} of a GPU"
    if placement.mode is Mode.DEDICATED:
        count = len(placement.gpu_indices)
        return "a whole GPU" if count == 1 else f"{count} whole GPUs"
    return f"{share.quantize(_CENT)} of a GPU"
