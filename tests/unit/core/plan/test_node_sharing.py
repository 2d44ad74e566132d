"""The Kubernetes target: every node's full GPUs take one sharing method (whole, MPS or
time-slicing) and MPS stays off nodes with MIG, as the NVIDIA device plugin needs; the host target
is untouched."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.plan import Mode, Plan, Target, make_plan, target_of
from gpuplex.core.plan.explain import explain
from gpuplex.core.spec import GpuplexSpec
from tests.unit.core.plan.factories import fleet, spec, tenant, workload

A100 = {"model": "A100-80GB", "count": 4}
ONE_METHOD = "Kubernetes's device plugin runs one sharing method per node"


def _four_methods(**top: Any) -> GpuplexSpec:
    """16 x A100 on 4 nodes; 5 GPUs of work in four modes. Binpack on a host puts it all on the
    first two nodes (whole GPUs, MIG, MPS and time-slicing side by side), leaving 11 idle."""
    return spec(
        fleet(A100, nodes=4),
        tenant("train", workload("job", {"count": 1}, replicas=2), isolation="dedicated"),
        tenant("bank", workload("chat", {"mig_profile": "3g.40gb"}, replicas=2), isolation="mig"),
        tenant("lab", workload("nb", {"memory_gib": 20}, replicas=3), isolation="mps"),
        tenant("etl", workload("batch", {"memory_gib": 30}, replicas=2), isolation="timeslice"),
        **top,
    )


def node_methods(plan: Plan) -> dict[str, set[Mode]]:
    """Node -> the modes of its GPUs in use."""
    out: dict[str, set[Mode]] = {}
    for gpu in plan.gpus:
        if gpu.mode is not None:
            out.setdefault(gpu.node, set()).add(gpu.mode)
    return out


def keeps_the_rule(methods: set[Mode]) -> bool:
    full = methods - {Mode.MIG}
    return len(full) <= 1 and not (Mode.MPS in full and Mode.MIG in methods)


def test_the_target_is_kubernetes_only_where_the_spec_writes_the_section() -> None:
    assert target_of(_four_methods()) is Target.HOST
    assert target_of(_four_methods(kubernetes={})) is Target.KUBERNETES
    assert target_of(_four_methods(kubernetes={"namespace_prefix": "t-"})) is Target.KUBERNETES


def test_a_host_plan_mixes_methods_on_one_node_and_leaves_11_gpus_idle() -> None:
    plan = make_plan(_four_methods())
    assert plan.summary.gpus_used == 5
    assert plan.summary.replicas_infeasible == 0
    assert not all(keeps_the_rule(m) for m in node_methods(plan).values())


@pytest.mark.parametrize("placement", ["binpack", "spread", "fragmentation"], ids=lambda p: str(p))
def test_a_kubernetes_plan_gives_each_node_one_method_and_places_everything(
    placement: str,
) -> None:
    plan = make_plan(_four_methods(kubernetes={}, policy={"placement": placement}))
    assert plan.summary.replicas_infeasible == 0
    methods = node_methods(plan)
    assert all(keeps_the_rule(m) for m in methods.values()), methods
    assert make_plan(_four_methods(policy={"placement": placement}), target=Target.KUBERNETES) == (
        plan
    )


def test_the_host_target_ignores_the_section() -> None:
    host = make_plan(_four_methods())
    assert make_plan(_four_methods(kubernetes={}), target=Target.HOST) == host
    assert make_plan(_four_methods(), target=Target.HOST) == host


def test_mps_never_joins_a_node_with_mig_gpus_even_empty_ones_pinned_by_mig_on() -> None:
    nodes = {
        "nodes": [
            {"name": "mig", "gpus": [{"model": "H100-80GB", "count": 2, "mig": "on"}, A100]},
            {"name": "plain", "gpus": [{"model": "A100-80GB", "count": 1}]},
        ]
    }
    shares = tenant("lab", workload("nb", {"memory_gib": 30}, replicas=4), isolation="mps")
    plan = make_plan(spec(nodes, shares, kubernetes={}))
    assert {p.node for p in plan.placements} == {"plain"}
    assert len(plan.placements) == 2
    assert [i.replica for i in plan.infeasible] == [2, 3]
    assert (
        "4 GPUs: free, but its node has GPUs in MIG mode; Kubernetes's device plugin runs no MPS "
        "on a node with MIG"
    ) in plan.infeasible[0].reasons


def test_a_node_that_runs_mps_takes_no_mig_slice() -> None:
    first = tenant("lab", workload("nb", {"memory_gib": 30}), isolation="mps", priority=9)
    then = tenant("bank", workload("chat", {"mig_profile": "1g.10gb"}), isolation="mig")
    plan = make_plan(spec(fleet({"model": "A100-80GB", "count": 2}), first, then, kubernetes={}))
    assert [p.label() for p in plan.placements] == ["lab/nb#0"]
    assert (
        "1 GPU: free, but its node's full GPUs run mps; Kubernetes's device plugin runs no MPS on "
        "a node with MIG"
    ) in plan.infeasible[0].reasons


def test_a_multi_gpu_replica_skips_a_node_whose_method_is_taken() -> None:
    shares = tenant("lab", workload("nb", {"memory_gib": 10}), isolation="timeslice", priority=9)
    whole = tenant("train", workload("job", {"count": 2}))
    both = fleet(A100, nodes=2)
    host = make_plan(spec(both, shares, whole))
    kube = make_plan(spec(both, shares, whole, kubernetes={}))
    # binpack takes the node with the fewest free GPUs that fit: beside the time-sliced share
    assert {p.label(): p.node for p in host.placements} == {"lab/nb#0": "n0", "train/job#0": "n0"}
    assert {p.label(): p.node for p in kube.placements} == {"lab/nb#0": "n0", "train/job#0": "n1"}


def test_an_empty_gpu_on_a_used_node_goes_before_an_untouched_node() -> None:
    """Spread would open a GPU on every node in turn and so fix every node's method; on
    Kubernetes it spreads over the GPUs of nodes already in use first."""
    whole = tenant("train", workload("job", {"count": 1}, replicas=2))
    shares = tenant("lab", workload("nb", {"memory_gib": 10}), isolation="mps")
    two = fleet(A100, nodes=2)
    host = make_plan(spec(two, whole, shares, policy={"placement": "spread"}))
    kube = make_plan(spec(two, whole, shares, kubernetes={}, policy={"placement": "spread"}))
    assert {p.node for p in host.placements if p.tenant == "train"} == {"n0", "n1"}
    assert host.infeasible == []
    assert [(p.node, p.gpu_indices) for p in kube.placements] == [
        ("n1", [0]),
        ("n0", [0]),
        ("n0", [1]),
    ]


def test_replanning_moves_a_replica_off_a_node_the_current_plan_mixed() -> None:
    host = make_plan(_four_methods())
    again = make_plan(_four_methods(kubernetes={}), host)
    assert again.summary.replicas_infeasible == 0
    assert all(keeps_the_rule(m) for m in node_methods(again).values())
    assert again.moves
    assert make_plan(_four_methods(kubernetes={}), again).moves == []


def test_explain_says_why_each_node_got_its_method_on_kubernetes_only() -> None:
    kube_spec = _four_methods(kubernetes={})
    plan = make_plan(kube_spec)
    mps_node = next(p.node for p in plan.placements if p.tenant == "lab")
    lines = explain(kube_spec, plan, "lab", "nb")
    assert (
        f"node {mps_node}: MPS, because lab/nb needs MPS shares and {ONE_METHOD}, so its full GPUs "
        "take only mps replicas; it holds no MIG slices, since Kubernetes's device plugin runs no "
        "MPS on a node with MIG"
    ) in lines
    mig_node = next(p.node for p in plan.placements if p.tenant == "bank")
    whole = explain(kube_spec, plan, "bank", "chat")
    assert any(
        line.startswith(f"node {mig_node}: ")
        and "MIG slices beside them: bank/chat" in line
        and ONE_METHOD in line
        for line in whole
    ), whole
    host_lines = explain(kube_spec, plan, "lab", "nb", target=Target.HOST)
    assert not any(line.startswith("node ") for line in host_lines)
    assert host_lines == lines[: len(host_lines)]


def test_explain_names_every_workload_that_fixed_a_time_sliced_node() -> None:
    kube_spec = spec(
        fleet({"model": "L4", "count": 2}),
        tenant("a", workload("w", {"memory_gib": 8}), isolation="timeslice"),
        tenant("b", workload("w", {"memory_gib": 8}), isolation="timeslice"),
        kubernetes={},
    )
    lines = explain(kube_spec, make_plan(kube_spec), "a", "w")
    assert lines[-1] == (
        f"node n0: time-slicing, because a/w, b/w need time-sliced shares and {ONE_METHOD}, so its "
        "full GPUs take only timeslice replicas"
    )
