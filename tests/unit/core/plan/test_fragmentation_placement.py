"""policy.placement: fragmentation: shares placed by fgd-balanced, everything else as binpack."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from gpuplex.core.fragmentation.scores import STRANDED_BOUND
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.plan.demand import size_on
from gpuplex.core.plan.index import FleetIndex
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.share_fragmentation import (
    ShareFragmentation,
    ShareSpot,
    free_milli,
    share_milli,
)
from gpuplex.core.plan.units import build_units
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy
from tests.unit.core.plan.factories import fleet, spec, tenant, workload
from tests.unit.core.plan.invariants import plan_violations
from tests.unit.core.plan.specs import specs

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

H100 = {"model": "H100-80GB", "count": 2}  # 81559 MiB each


def placed(plan: Plan) -> dict[str, tuple[str, list[int]]]:
    return {p.label(): (p.node, p.gpu_indices) for p in plan.placements}


def with_policy(base: GpuplexSpec, policy: str) -> GpuplexSpec:
    document = base.model_dump(mode="json")
    document["policy"]["placement"] = policy
    return GpuplexSpec.model_validate(document)


def timeslice_30_then_48(policy: str) -> GpuplexSpec:
    """Two 30 GiB shares placed first (higher priority), then two of 48 GiB: 30 + 48 fit one GPU."""
    return spec(
        fleet(H100),
        tenant(
            "small",
            workload("w", {"memory_gib": 30}, replicas=2),
            isolation="timeslice",
            priority=2,
        ),
        tenant(
            "big", workload("w", {"memory_gib": 48}, replicas=2), isolation="timeslice", priority=1
        ),
        policy={"placement": policy},
    )


def test_memory_binpack_blocks_the_second_large_share_fragmentation_places_it() -> None:
    # binpack puts both 30 GiB shares on GPU 0 (20 GiB left): one 48 GiB share has no GPU
    binpack = make_plan(timeslice_30_then_48("binpack"))
    assert placed(binpack) == {
        "small/w#0": ("n0", [0]),
        "small/w#1": ("n0", [0]),
        "big/w#0": ("n0", [1]),
    }
    assert [i.label() for i in binpack.infeasible] == ["big/w#1"]
    # fragmentation, in milli of the GPU: 30 GiB asks 377, 48 GiB asks 603, each half the shares.
    # Joining GPU 0 (623 free, every share fits: F = 0) leaves 246, where none fits: F = 246,
    # score trunc(100 * sigmoid(-0.246)) = 43. Opening GPU 1 leaves 623: F stays 0, score 50.
    frag = make_plan(timeslice_30_then_48("fragmentation"))
    assert placed(frag) == {
        "small/w#0": ("n0", [0]),
        "small/w#1": ("n0", [1]),
        "big/w#0": ("n0", [0]),
        "big/w#1": ("n0", [1]),
    }
    assert frag.infeasible == []
    reasons = {p.label(): p.reason for p in frag.placements}
    assert reasons["small/w#1"] == (
        "fragmentation: opens a GPU for timeslice, F grows least (FGD score 50)"
    )
    # 48 GiB on 623 free leaves 20 milli no share fits: F = 20, trunc(100 * sigmoid(-0.02)) = 49
    assert reasons["big/w#0"] == (
        "fragmentation: shares a timeslice GPU, F grows least (FGD score 49)"
    )
    assert frag.policy == "fragmentation"
    assert plan_violations(timeslice_30_then_48("fragmentation"), frag) == []


def mps_40_then_60(policy: str) -> GpuplexSpec:
    """MPS compute runs out while memory is left: 40 % shares first, then 60 % ones, 10 GiB each."""
    return spec(
        fleet(H100),
        tenant(
            "light",
            workload("w", {"memory_gib": 10, "compute_percent": 40}, replicas=2),
            isolation="mps",
            priority=2,
        ),
        tenant(
            "heavy",
            workload("w", {"memory_gib": 10, "compute_percent": 60}, replicas=2),
            isolation="mps",
            priority=1,
        ),
        policy={"placement": policy},
    )


def test_compute_binpack_blocks_the_second_heavy_share_fragmentation_places_it() -> None:
    binpack = make_plan(mps_40_then_60("binpack"))
    assert placed(binpack)["light/w#1"] == ("n0", [0])  # 80 % of GPU 0's threads taken
    assert [i.label() for i in binpack.infeasible] == ["heavy/w#1"]
    # Joining GPU 0 (60 % left, 874 milli free) leaves 20 %: no share fits, F = 748 free milli,
    # score trunc(100 * sigmoid(-0.748)) = 32; opening GPU 1 keeps every share fitting: 50.
    frag = make_plan(mps_40_then_60("fragmentation"))
    assert placed(frag) == {
        "light/w#0": ("n0", [0]),
        "light/w#1": ("n0", [1]),
        "heavy/w#0": ("n0", [0]),
        "heavy/w#1": ("n0", [1]),
    }
    assert frag.infeasible == []
    assert "FGD score 32" in {p.label(): p.reason for p in frag.placements}["heavy/w#0"]


def test_memory_is_read_as_milli_of_the_gpu_rounded_against_the_share() -> None:
    h100 = build_inventory(spec(fleet(H100)).fleet, PlacementPolicy.BINPACK)[0].model
    assert share_milli(30 * 1024, h100) == 377  # 376.66 up
    assert free_milli(81559 - 30 * 1024, h100) == 623  # 623.34 down
    assert share_milli(0, h100) == 1  # still a GPU ask


def test_equal_fgd_scores_go_where_less_gpu_is_stranded_by_compute() -> None:
    document = spec(
        fleet(H100),
        tenant(
            "t",
            workload("light", {"memory_gib": 10, "compute_percent": 20}),
            workload("heavy", {"memory_gib": 10, "compute_percent": 60}),
            isolation="mps",
        ),
    )
    slots = build_inventory(document.fleet, PlacementPolicy.BINPACK)
    _, units = build_units(document, slots)
    scorer = ShareFragmentation(units, slots)
    light = next(u for u in units if u.key[1] == "light")
    sized = size_on(light, slots[0].model)
    assert sized is not None
    # rho = (20 + 60) % over 2 * 126 milli: 100 % feeds 315 milli, 80 % feeds 252.
    # empty GPU: stranded 1000 - 315 = 685 before, 874 - 252 = 622 after: -63.
    # 260 milli free, no threads used: 0 stranded before and after (134 - 252 < 0).
    # Every share fits both before and after on both: FGD scores 50 and 50.
    empty, tight = ShareSpot(81559, 0), ShareSpot(21206, 0)
    assert free_milli(tight.free_memory_mib, slots[0].model) == 260
    roomy_score, tight_score = scorer.scores(slots[0].group, Mode.MPS, sized, [empty, tight])
    assert roomy_score.fgd_score == tight_score.fgd_score == 50
    assert tight_score.key == 50 * (2 * STRANDED_BOUND + 1) + STRANDED_BOUND
    assert roomy_score.key - tight_score.key == 63


def test_the_index_refuses_a_scorer_that_does_not_match_its_policy() -> None:
    slots = build_inventory(spec(fleet(H100)).fleet, PlacementPolicy.BINPACK)
    with pytest.raises(ValueError, match="fragmentation"):
        FleetIndex(slots, PlacementPolicy.FRAGMENTATION, {})
    with pytest.raises(ValueError, match="fragmentation"):
        FleetIndex(slots, PlacementPolicy.BINPACK, {}, ShareFragmentation([], slots))


def test_the_spec_accepts_the_policy_by_name() -> None:
    assert spec(fleet(H100), policy={"placement": "fragmentation"}).policy.placement is (
        PlacementPolicy.FRAGMENTATION
    )


@SETTINGS
@given(specs())
def test_fragmentation_plans_respect_every_invariant(drawn: GpuplexSpec) -> None:
    document = with_policy(drawn, "fragmentation")
    plan = make_plan(document)
    assert plan_violations(document, plan) == []
    assert plan.model_dump_json() == make_plan(document).model_dump_json()
    again = make_plan(document, Plan.model_validate_json(plan.model_dump_json()))
    assert again.moves == []
    assert again.preemptions == []


def _without_share_modes(document: dict[str, Any]) -> dict[str, Any]:
    for entry in document["tenants"]:
        if entry["isolation"] in ("mps", "timeslice"):
            entry["isolation"] = "dedicated"
    return document


@SETTINGS
@given(specs())
def test_without_shares_fragmentation_places_exactly_as_binpack(drawn: GpuplexSpec) -> None:
    base = GpuplexSpec.model_validate(_without_share_modes(drawn.model_dump(mode="json")))
    binpack = make_plan(with_policy(base, "binpack"))
    assume(all(d.mode in (Mode.DEDICATED, Mode.MIG) for d in binpack.decisions))
    frag = make_plan(with_policy(base, "fragmentation"))
    assert frag.policy == "fragmentation"
    # the same plan, reasons included: dedicated and MIG replicas are placed by binpack's rule
    assert frag.model_dump(exclude={"policy"}) == binpack.model_dump(exclude={"policy"})
