"""Properties of the node configuration over random specs: what renders follows the GPU operator's
rules and gives every pool the MIG slices its placements ask for; what is refused is exactly what
the device plugin cannot run."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings, strategies as st

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import Mode, Plan, make_plan
from gpuplex.core.spec import GpuplexSpec, MigModeSpec
from gpuplex.core.spec.pools import fleet_pools, workload_pool
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import mig_resource
from gpuplex.kube.node_config import node_config
from tests.unit.core.plan.specs import specs
from tests.unit.kube.gpu_operator_rules import (
    layout_counts,
    node_config_problems,
    parse_node_config,
)
from tests.unit.kube.kube_specs import crowded_specs, kube_specs
from tests.unit.kube.schema import assert_valid

POOL_LABEL = "pool.gpuplex.dev/"


def _pools_of_placements(spec: GpuplexSpec, plan: Plan) -> dict[tuple[str, str], str | None]:
    pools = fleet_pools(spec.fleet)
    return {
        (tenant.name, workload.name): workload_pool(pools, workload)
        for tenant in spec.tenants
        for workload in tenant.workloads
    }


def _admits(node: dict[str, Any], pool: str | None) -> bool:
    """Would the pod of a workload in `pool` be scheduled on this Node (selector and taints)?"""
    if pool is None:
        return not node.get("spec", {}).get("taints")
    labels: dict[str, str] = node["metadata"]["labels"]
    return labels.get(POOL_LABEL + pool) == "true"


def _node_mig(spec: GpuplexSpec, manifests: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """Node -> MIG resource -> how many instances its assigned layout creates."""
    _, mig_doc, nodes = parse_node_config(manifests)
    out: dict[str, Counter[str]] = {}
    for node in spec.fleet.nodes:
        layout = mig_doc["mig-configs"][
            nodes[node.name]["metadata"]["labels"]["nvidia.com/mig.config"]
        ]
        gpus = sum(g.count for g in node.gpus)
        out[node.name] = Counter()
        for counts in layout_counts(layout, gpus).values():
            for profile, count in counts.items():
                out[node.name][mig_resource(profile)] += count
    return out


@settings(max_examples=40, deadline=None)  # with test_kube_target, enough to catch a clash
@given(kube_specs())
def test_kube_laid_out_specs_render_valid_configs_that_hold_every_pools_mig_slices(
    spec: GpuplexSpec,
) -> None:
    plan = make_plan(spec)
    rendered = node_config(spec, plan)
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    plugin, _, nodes = parse_node_config(rendered.manifests)
    layouts = _node_mig(spec, rendered.manifests)
    pool_of = _pools_of_placements(spec, plan)

    # Per pool: the MIG resources its placements ask for fit the layouts of the nodes its pods
    # may be scheduled on (labels and taints as rendered).
    asked: dict[str | None, Counter[str]] = {}
    for p in plan.placements:
        if p.mode is Mode.MIG and p.mig is not None:
            pool = pool_of[(p.tenant, p.workload)]
            asked.setdefault(pool, Counter())[mig_resource(p.mig.profile)] += 1
    for pool, wanted in asked.items():
        offered: Counter[str] = Counter()
        for name, node in nodes.items():
            if _admits(node, pool):
                offered.update(layouts[name])
        for resource, count in wanted.items():
            assert count <= offered[resource], (pool, resource, count, offered)

    # Per node: its layout creates exactly the slices placed on it, and every placement's pod is
    # admitted by its node and finds the sharing method it was planned.
    on_node: dict[str, Counter[str]] = {n.name: Counter() for n in spec.fleet.nodes}
    for p in plan.placements:
        node = nodes[p.node]
        assert _admits(node, pool_of[(p.tenant, p.workload)]), (p.label(), node)
        config = plugin[node["metadata"]["labels"]["nvidia.com/device-plugin.config"]]
        sharing = config.get("sharing", {})
        if p.mode is Mode.MIG and p.mig is not None:
            on_node[p.node][mig_resource(p.mig.profile)] += 1
            assert config["flags"]["migStrategy"] == "mixed"
        elif p.mode is Mode.MPS:
            assert "mps" in sharing
        elif p.mode is Mode.TIMESLICE:
            assert "timeSlicing" in sharing
        else:
            assert sharing == {}
    assert on_node == layouts


def _expected_clashes(spec: GpuplexSpec, plan: Plan) -> set[str]:
    """Nodes the device plugin cannot run, worked out from the plan and the spec alone: two
    methods among full GPUs, or MPS beside a GPU in MIG mode (planned slices or `mig: on`)."""
    clashing = set()
    for node in spec.fleet.nodes:
        pinned = [
            g.mig is MigModeSpec.ON and gpu_model(g.model).mig is not None  # type: ignore[union-attr]
            for g in node.gpus
            for _ in range(g.count)
        ]
        gpus = [g for g in plan.gpus if g.node == node.name]
        in_mig = {g.index for g in gpus if g.mode is Mode.MIG or pinned[g.index]}
        full = {g.mode for g in gpus if g.index not in in_mig and g.mode is not None}
        if len(full) > 1 or (Mode.MPS in full and in_mig):
            clashing.add(node.name)
    return clashing


@settings(max_examples=40, deadline=None)  # with test_kube_target, enough to catch a clash
@given(st.one_of(specs(), crowded_specs()))
def test_any_spec_renders_unless_a_node_needs_what_the_device_plugin_cannot_do(
    spec: GpuplexSpec,
) -> None:
    plan = make_plan(spec)
    clashing = _expected_clashes(spec, plan)
    try:
        rendered = node_config(spec, plan)
    except KubeRenderError as error:
        named = {line.split(":")[0].removeprefix("- node ") for line in str(error).splitlines()[1:]}
        assert named == clashing
        return
    assert clashing == set()
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    _, _, nodes = parse_node_config(rendered.manifests)
    pool_of = _pools_of_placements(spec, plan)
    for p in plan.placements:
        assert _admits(nodes[p.node], pool_of[(p.tenant, p.workload)]), p.label()
