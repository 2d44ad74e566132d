"""Preemption picks what it leaves out and what it disrupts, not only how many it evicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from tests.unit.core.plan.factories import fleet, spec, tenant, workload

EXAMPLE = Path(__file__).parents[4] / "examples" / "saas-single-server.yaml"


def with_urgent_job(data: dict[str, Any], replicas: int) -> GpuplexSpec:
    urgent = tenant(
        "urgent",
        workload("job", {"count": 1}, kind="batch", replicas=replicas, command=["train"]),
        priority=200,
    )
    return GpuplexSpec.model_validate({**data, "tenants": [*data["tenants"], urgent]})


def outcome(plan: Plan, priorities: dict[str, int]) -> tuple[tuple[int, ...], int]:
    """What a plan left out (priorities, highest first) and what it disrupted."""
    left_out = tuple(sorted((priorities[p.tenant] for p in plan.preemptions), reverse=True))
    return left_out, len(plan.moves) + len(plan.mig_reconfigurations)


def test_a_priority_200_job_evicts_the_free_tier_directly_instead_of_a_cascade() -> None:
    """The saas example's 8 GPUs hold 6 busy ones: the job's third replica needs a GPU back.
    Evicting rerank (one replica) used to start a cascade: rerank evicted contoso's MIG GPU,
    contoso evicted the hobbyists, 3 moves and 2 MIG layout changes. Evicting the hobbyists'
    MPS GPU leaves the same replicas out and moves nothing."""
    data = yaml.safe_load(EXAMPLE.read_text())
    current = make_plan(GpuplexSpec.model_validate(data))
    assert current.summary.replicas_infeasible == 0
    plan = make_plan(with_urgent_job(data, replicas=3), current)
    assert sorted(p.label() for p in plan.preemptions) == [
        f"hobbyists/playground#{r}" for r in range(4)
    ]
    assert plan.moves == []
    assert plan.mig_reconfigurations == []
    assert {p.by for p in plan.preemptions} == {"urgent/job#2"}
    assert len([p for p in plan.placements if p.tenant == "urgent"]) == 3


def test_a_victim_that_fits_elsewhere_moves_rather_than_a_replica_being_left_out() -> None:
    """The A30 holds a priority-50 MPS share, the L4 a priority-0 one that runs only on an L4:
    evicting the priority-0 share leaves it out; evicting the priority-50 one moves it beside
    the other, and nobody is left out."""
    gpus = [{"model": "A30", "count": 1, "mig": "off"}, {"model": "L4", "count": 1}]
    base = {"nodes": [{"name": "n0", "gpus": gpus}]}
    mid = tenant("mid", workload("w", {"memory_gib": 4}), isolation="mps", priority=50)
    low = tenant("low", workload("w", {"memory_gib": 4, "model": "L4"}), isolation="mps")
    spread = {"placement": "spread"}
    current = make_plan(spec(base, mid, low, policy=spread))
    assert [(p.label(), p.gpu_model) for p in current.placements] == [
        ("low/w#0", "L4"),
        ("mid/w#0", "A30"),
    ]
    high = tenant("high", workload("w", {"count": 1}), priority=100)
    plan = make_plan(spec(base, mid, low, high, policy=spread), current)
    assert plan.preemptions == []
    assert [m.label() for m in plan.moves] == ["mid/w#0"]
    moved = next(p for p in plan.placements if p.tenant == "mid")
    assert (moved.gpu_model, moved.reason) == ("L4", "moved to make room for high/w#0")


PRIORITIES = [0, 10, 50, 100]


@st.composite
def busy_fleets(draw: st.DrawFn) -> tuple[GpuplexSpec, GpuplexSpec]:
    """A single node of whole-GPU and MPS replicas at several priorities, and the same spec with
    a priority-200 job that needs one GPU more than the idle ones."""
    gpus = draw(st.integers(2, 4))
    tenants: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            job = workload("w", {"count": 1}, replicas=draw(st.integers(1, 2)))
            isolation = "dedicated"
        else:
            memory = draw(st.sampled_from([6, 10, 20, 30]))
            job = workload("w", {"memory_gib": memory}, replicas=draw(st.integers(1, 4)))
            isolation = "mps"
        priority = draw(st.sampled_from(PRIORITIES))
        tenants.append(tenant(f"t{n}", job, isolation=isolation, priority=priority))
    placement = draw(st.sampled_from(["binpack", "spread"]))
    base = fleet({"model": "H100-80GB", "count": gpus, "mig": "off"})
    before = spec(base, *tenants, policy={"placement": placement})
    idle = gpus - make_plan(before).summary.gpus_used
    urgent = tenant("urgent", workload("job", {"count": 1}, replicas=idle + 1), priority=200)
    return before, spec(base, *tenants, urgent, policy={"placement": placement})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(busy_fleets())
def test_preemption_is_never_worse_than_evicting_one_gpus_replicas_directly(
    specs: tuple[GpuplexSpec, GpuplexSpec],
) -> None:
    """Against every GPU the job could have emptied (all its replicas left out, nothing moved),
    the plan leaves out no higher priorities, and at equal ones disrupts no more."""
    before, after = specs
    current = make_plan(before)
    if current.infeasible:
        return  # a replica that never fitted may preempt on its own: not this property
    priorities = {t.name: t.priority for t in after.tenants}
    plan = make_plan(after, current)
    assert plan.infeasible == []
    direct = [
        (tuple(sorted((priorities[o.tenant] for o in gpu.occupants), reverse=True)), 0)
        for gpu in current.gpus
        if gpu.occupants
    ]
    assert outcome(plan, priorities) <= min(direct)
