"""Plans made for Kubernetes render: the planner keeps each node to the one sharing method the
NVIDIA device plugin runs, so `gpuplex kube render` never refuses what `gpuplex plan` made."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.plan import Plan, Target, make_plan, target_of
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.kubernetes import KubernetesSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.render import render_plan
from gpuplex.specfile import load_spec_file
from tests.unit.core.plan.invariants import plan_violations
from tests.unit.core.plan.specs import specs
from tests.unit.kube.kube_specs import crowded_specs

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples").glob("*.yaml"))


def _for_kubernetes(spec: GpuplexSpec) -> GpuplexSpec:
    """The same spec with a `kubernetes:` section written out."""
    return spec.model_copy(update={"kubernetes": KubernetesSpec()})


def _renders(spec: GpuplexSpec, plan: Plan) -> bool:
    try:
        render_plan(spec, plan)
    except KubeRenderError:
        return False
    return True


@settings(max_examples=50, deadline=None)
@given(st.one_of(specs(), crowded_specs()), specs())
def test_a_spec_with_a_kubernetes_section_plans_exactly_what_kube_render_renders(
    host_spec: GpuplexSpec, other: GpuplexSpec
) -> None:
    """`gpuplex plan` returns a plan for every spec (what does not fit is a value with reasons);
    with a `kubernetes:` section `kube render` renders every such plan, also one re-planned
    against a current plan made for a host, and a re-plan against itself moves nothing."""
    spec = _for_kubernetes(host_spec)
    assert target_of(spec) is Target.KUBERNETES
    plan = make_plan(spec)
    assert plan_violations(spec, plan) == []
    assert _renders(spec, plan)
    assert make_plan(spec, plan).moves == []
    for current in (make_plan(host_spec), make_plan(other)):
        replanned = make_plan(spec, current)
        assert plan_violations(spec, replanned) == []
        assert _renders(spec, replanned)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_when_planned_for_kubernetes(example: Path) -> None:
    spec = _for_kubernetes(load_spec_file(example))
    plan = make_plan(spec)
    assert plan == make_plan(load_spec_file(example), target=Target.KUBERNETES)
    rendered = render_plan(spec, plan)
    assert rendered.manifests
    unplaced = [n for n in rendered.notes if n.endswith("the plan could not place it")]
    assert len(unplaced) == plan.summary.replicas_infeasible


def test_five_examples_and_the_ones_that_need_the_rule_are_refused_as_host_plans() -> None:
    assert len(EXAMPLES) == 5
    refused = [p.stem for p in EXAMPLES if not _renders(*_host_plan(p))]
    assert refused == ["enterprise-cluster", "host-demo", "saas-single-server"]


def _host_plan(example: Path) -> tuple[GpuplexSpec, Plan]:
    spec = load_spec_file(example)
    return spec, make_plan(spec, target=Target.HOST)
