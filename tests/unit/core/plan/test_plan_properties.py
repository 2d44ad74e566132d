"""Properties of the planner over random fleets and workloads (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from tests.unit.core.plan.invariants import plan_violations
from tests.unit.core.plan.specs import specs

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(specs())
def test_plans_respect_geometry_capacity_quotas_cotenancy_and_pools(spec: GpuplexSpec) -> None:
    assert plan_violations(spec, make_plan(spec)) == []


@SETTINGS
@given(specs())
def test_same_input_gives_byte_identical_json(spec: GpuplexSpec) -> None:
    assert make_plan(spec).model_dump_json() == make_plan(spec).model_dump_json()


@SETTINGS
@given(specs())
def test_replanning_unchanged_spec_against_own_plan_moves_nothing(spec: GpuplexSpec) -> None:
    first = make_plan(spec)
    again = make_plan(spec, Plan.model_validate_json(first.model_dump_json()))
    assert again.moves == []
    assert again.mig_reconfigurations == []
    assert again.preemptions == []
    assert [(p.label(), p.node, p.gpu_indices, p.mig) for p in again.placements] == [
        (p.label(), p.node, p.gpu_indices, p.mig) for p in first.placements
    ]
    assert plan_violations(spec, again) == []


@SETTINGS
@given(specs(), specs())
def test_replanning_against_another_specs_plan_stays_valid(
    spec: GpuplexSpec, other: GpuplexSpec
) -> None:
    """A current plan from an unrelated spec must never break the invariants."""
    replanned = make_plan(spec, make_plan(other))
    assert plan_violations(spec, replanned) == []


def _saas_like() -> GpuplexSpec:
    return GpuplexSpec.model_validate(
        {
            "fleet": {"nodes": [{"name": "n", "gpus": [{"model": "H100-80GB", "count": 2}]}]},
            "tenants": [
                {
                    "name": "a",
                    "isolation": "mig",
                    "workloads": [{"name": "w", "gpu": {"mig_profile": "3g.40gb"}, "replicas": 2}],
                },
                {
                    "name": "b",
                    "isolation": "mps",
                    "quota": {"gpu_memory_gib": 30},
                    "workloads": [{"name": "w", "gpu": {"memory_gib": 10}, "replicas": 2}],
                },
            ],
        }
    )


def test_the_checker_catches_overlapping_mig_slices() -> None:
    spec = _saas_like()
    plan = make_plan(spec)
    gpu = next(g for g in plan.gpus if g.mode == "mig")
    assert gpu.occupants[0].mig is not None
    moved = gpu.occupants[1].model_copy(update={"mig": gpu.occupants[0].mig})
    broken_gpu = gpu.model_copy(update={"occupants": [gpu.occupants[0], moved]})
    broken = plan.model_copy(update={"gpus": [broken_gpu if g is gpu else g for g in plan.gpus]})
    assert any("overlaps" in v for v in plan_violations(spec, broken))


def test_the_checker_catches_quota_and_lost_replicas() -> None:
    spec = _saas_like()
    plan = make_plan(spec)
    assert plan_violations(spec, plan) == []
    extra = plan.placements[-1].model_copy(update={"replica": 7, "memory_mib": 25 * 1024})
    broken = plan.model_copy(update={"placements": [*plan.placements[:-1], extra]})
    found = plan_violations(spec, broken)
    assert any("memory over quota" in v for v in found)
    assert any("lost or invented" in v for v in found)


@settings(max_examples=200, deadline=None)
@given(specs())
def test_generated_specs_cover_every_mode(spec: GpuplexSpec) -> None:
    """Not a property of the planner: a guard that the generator keeps exercising all modes."""
    modes = {p.mode for p in make_plan(spec).placements}
    _SEEN_MODES.update(modes)


_SEEN_MODES: set[str] = set()


def test_zz_all_modes_were_seen() -> None:
    if not _SEEN_MODES:
        test_generated_specs_cover_every_mode()
    assert {"dedicated", "mig", "mps", "timeslice"} == _SEEN_MODES
