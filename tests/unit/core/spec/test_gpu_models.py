"""fleet.gpu_models: cards the built-in catalog does not list, added by the spec. The planner,
validation, pricing and the Kubernetes renderer see them; they never have MIG and never redefine
a built-in model."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.apply.discover import with_discovered_fleet
from gpuplex.core.catalog import Catalog, Provenance
from gpuplex.core.plan import Mode, make_plan
from gpuplex.core.spec import GpuplexSpec, NodeSpec, validate_spec
from gpuplex.kube.nodes import node_gpus

L40 = {"name": "L40", "memory_gib": 48, "sm_count": 142}
RTX_6000_ADA = {"name": "RTX-6000-Ada", "memory_mib": 49140, "sm_count": 142}


def _doc(models: list[dict[str, Any]], nodes: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    tenants = [
        {
            "name": "acme",
            "isolation": "dedicated",
            "workloads": [{"name": "big", "gpu": {"count": 2, "model": "L40"}}],
        },
        {
            "name": "beta",
            "isolation": "mps",
            "workloads": [{"name": "small", "replicas": 3, "gpu": {"memory_gib": 20}}],
        },
    ]
    return {"fleet": {"gpu_models": models, "nodes": nodes}, "tenants": tenants, **top}


L40_FLEET = [
    {"name": "box-1", "gpus": [{"model": "L40", "count": 4}]},
    {"name": "box-2", "gpus": [{"model": "L40", "count": 4}]},
]


def _valid(data: dict[str, Any]) -> GpuplexSpec:
    result = validate_spec(data)
    assert isinstance(result, GpuplexSpec), result
    return result


def _problems(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    result = validate_spec(data)
    assert isinstance(result, list), "expected problems"
    return [(problem.path, problem.message) for problem in result]


def test_an_l40_fleet_plans_with_the_memory_the_spec_gives() -> None:
    spec = _valid(_doc([L40], L40_FLEET, pricing={"gpu_hour": {"L40": 1.1}}))
    plan = make_plan(spec)
    assert plan.infeasible == []
    assert len(plan.placements) == 4
    assert {p.gpu_model for p in plan.placements} == {"L40"}
    big = next(p for p in plan.placements if p.workload == "big")
    assert big.mode is Mode.DEDICATED
    assert big.memory_mib == 2 * 48 * 1024  # two whole L40s
    small = [p for p in plan.placements if p.workload == "small"]
    assert {p.mode for p in small} == {Mode.MPS}
    assert all(p.thread_percent == 42 for p in small)  # 20 of 48 GiB, rounded up


def test_memory_in_mib_and_a_second_added_model() -> None:
    nodes = [{"name": "box", "gpus": [{"model": "L40", "count": 2}, {"model": "RTX-6000-Ada"}]}]
    spec = _valid(_doc([L40, RTX_6000_ADA], nodes))
    model = spec.fleet.catalog.model("RTX-6000-Ada")
    assert model is not None
    assert (model.memory_mib, model.sm_count, model.mig) == (49140, 142, None)
    assert model.provenance is Provenance.SPEC
    assert spec.fleet.catalog.model("L40S") is Catalog().model("L40S")  # built-ins stay


def test_a_workload_asking_for_too_much_of_an_added_card_is_refused() -> None:
    data = _doc([L40], L40_FLEET)
    data["tenants"][1]["workloads"][0]["gpu"] = {"memory_gib": 60}
    assert any("60" in message for _, message in _problems(data))


def test_without_the_entry_the_model_is_unknown_and_the_hint_says_where_to_add_it() -> None:
    problems = _problems(_doc([], L40_FLEET))
    assert problems[0][0] == ("fleet", "nodes", 0, "gpus", 0, "model")
    assert "unknown GPU model 'L40'" in problems[0][1]
    assert "fleet.gpu_models" in problems[0][1]


@pytest.mark.parametrize(
    ("entry", "path", "words"),
    [
        (
            {"name": "L40S", "memory_gib": 40, "sm_count": 100},
            ("fleet", "gpu_models", 0, "name"),
            "L40S is a built-in model",
        ),
        (
            {"name": "h100-80gb", "memory_gib": 80, "sm_count": 132},
            ("fleet", "gpu_models", 0, "name"),
            'did you mean "H100-80GB"',
        ),
        (
            {"name": "L40", "sm_count": 142},
            ("fleet", "gpu_models", 0),
            "memory_gib or memory_mib",
        ),
        (
            {"name": "L40", "memory_gib": 48, "memory_mib": 49152, "sm_count": 142},
            ("fleet", "gpu_models", 0, "memory_mib"),
            "not both",
        ),
        (
            {"name": "L40", "memory_gib": 48, "sm_count": 142, "mig": {"profiles": ["1g.12gb"]}},
            ("fleet", "gpu_models", 0, "mig"),
            "has no MIG",
        ),
    ],
    ids=["redefines", "redefines-in-other-case", "no-memory", "both-memories", "declares-mig"],
)
def test_bad_entries(entry: dict[str, Any], path: tuple[str | int, ...], words: str) -> None:
    nodes = [{"name": "box", "gpus": [{"model": "L40S", "count": 4}]}]
    data = _doc([entry], nodes)
    data["tenants"][0]["workloads"][0]["gpu"] = {"count": 2}
    problems = _problems(data)
    assert any(p == path and words in message for p, message in problems), problems


def test_a_redefinition_never_changes_the_built_in_model() -> None:
    data = _doc([{"name": "L40S", "memory_gib": 1000, "sm_count": 1}], [])
    spec = GpuplexSpec.model_validate(data)  # the shape alone: rules would refuse it
    model = spec.fleet.catalog.model("L40S")
    assert model is not None
    assert model.memory_mib == 46068
    assert spec.fleet.catalog.names().count("L40S") == 1


def test_an_added_model_twice_is_refused() -> None:
    problems = _problems(_doc([L40, L40], L40_FLEET))
    assert (("fleet", "gpu_models", 1, "name"), "GPU model 'L40' is added twice") in problems


def test_mig_on_an_added_model_is_refused() -> None:
    nodes = [{"name": "box", "gpus": [{"model": "L40", "count": 4, "mig": "on"}]}]
    problems = _problems(_doc([L40], nodes))
    assert (("fleet", "nodes", 0, "gpus", 0, "mig"), "L40 has no MIG; use mig: off") in problems


def test_a_mig_profile_on_an_added_model_is_refused() -> None:
    data = _doc([L40], L40_FLEET)
    data["tenants"][1]["isolation"] = "mig"
    data["tenants"][1]["workloads"][0]["gpu"] = {"mig_profile": "1g.10gb", "model": "L40"}
    assert _problems(data)


def test_pricing_takes_an_added_model_and_still_refuses_unknown_ones() -> None:
    _valid(_doc([L40], L40_FLEET, pricing={"gpu_hour": {"L40": 1.1}}))
    problems = _problems(_doc([L40], L40_FLEET, pricing={"gpu_hour": {"L40x": 1.1}}))
    assert problems == [
        (("pricing", "gpu_hour", "L40x"), "unknown GPU model 'L40x' (did you mean \"L40\"?)")
    ]


def test_kubernetes_numbers_gpus_of_added_models_like_the_planner() -> None:
    """An added group before a `mig: on` group: the H100 is GPU 2, as the planner numbers it."""
    nodes = [
        {"name": "box", "gpus": [{"model": "L40", "count": 2}, {"model": "H100-80GB", "mig": "on"}]}
    ]
    data = _doc([L40], nodes, kubernetes={})
    data["tenants"] = data["tenants"][:1]
    spec = _valid(data)
    plan = make_plan(spec)
    (node,) = node_gpus(spec, plan)
    assert node.pinned_mig == frozenset({2})
    assert [g.model for g in node.gpus] == ["L40", "L40", "H100-80GB"]
    assert [g.index for g in node.full_gpus()] == [0, 1]


def test_a_discovered_fleet_keeps_the_added_models() -> None:
    spec = _valid(_doc([L40], L40_FLEET))
    node = NodeSpec.model_validate({"name": "box-1", "gpus": [{"model": "L40", "count": 4}]})
    filled = with_discovered_fleet(spec, node)
    assert isinstance(filled, GpuplexSpec), filled
    assert filled.fleet.catalog.model("L40") is not None


def test_the_json_schema_has_no_mig_for_added_models() -> None:
    schema = GpuplexSpec.model_json_schema()
    assert set(schema["$defs"]["GpuModelSpec"]["properties"]) == {
        "name",
        "memory_gib",
        "memory_mib",
        "sm_count",
    }
