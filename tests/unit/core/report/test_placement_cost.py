"""What `plan` and `explain` say a placement costs per hour: the allocation price, else its share."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from gpuplex.core.plan import make_plan
from gpuplex.core.report.placement_cost import PlacementCost, placement_cost
from tests.unit.core.plan.factories import fleet, spec, tenant, workload

H100 = {"model": "H100-80GB", "count": 1}


def cost_of(gpu: dict[str, Any], isolation: str, pricing: dict[str, Any]) -> PlacementCost:
    planned = spec(
        fleet(H100), tenant("t", workload("w", gpu), isolation=isolation), pricing=pricing
    )
    plan = make_plan(planned)
    [placement] = plan.placements
    return placement_cost(placement, plan, planned.pricing)


def test_a_mig_slice_costs_its_compute_fraction_of_gpu_hour() -> None:
    cost = cost_of({"mig_profile": "3g.40gb"}, "mig", {"gpu_hour": {"H100-80GB": "7.00"}})
    assert cost.price_per_hour == Decimal("3.00")
    assert cost.sentence() == "3.00 USD/h for 3/7 of a GPU"


def test_an_explicit_mig_hour_wins() -> None:
    pricing = {"gpu_hour": {"H100-80GB": "7.00"}, "mig_hour": {"H100-80GB": {"3g.40gb": "2.50"}}}
    assert cost_of({"mig_profile": "3g.40gb"}, "mig", pricing).price_per_hour == Decimal("2.50")


def test_an_mps_share_costs_its_threads_times_the_multiplier() -> None:
    pricing = {"gpu_hour": {"H100-80GB": "4.00"}, "share_multiplier": {"mps": "0.5"}}
    cost = cost_of({"memory_gib": 8, "compute_percent": 20}, "mps", pricing)
    assert cost.price_per_hour == Decimal("0.40")
    assert cost.short() == "0.40 USD/h"


def test_without_a_price_the_cost_is_the_share_of_a_gpu() -> None:
    cost = cost_of({"count": 1}, "dedicated", {})
    assert cost.price_per_hour is None
    assert cost.short() == "a whole GPU"
    assert cost.sentence() == "a whole GPU; no price (pricing has no gpu_hour for this GPU model)"
