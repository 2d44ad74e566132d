"""How configs are named and which Node labels and taints point pods and the GPU operator at them."""

from __future__ import annotations

import pytest

from gpuplex.core.plan import Mode
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.node_config import node_config
from gpuplex.kube.nodes import gpu_list
from tests.unit.kube.gpu_operator_rules import node_config_problems, parse_node_config
from tests.unit.kube.schema import assert_valid
from tests.unit.kube.test_node_config import (
    _gpu,
    _h100,
    _node,
    _plan,
    _shared,
    _slice,
    _spec,
    _whole,
)


def _names(spec: GpuplexSpec, *gpus: object) -> dict[str, tuple[str, str]]:
    rendered = node_config(spec, _plan(spec, *gpus))  # type: ignore[arg-type]
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    _, _, nodes = parse_node_config(rendered.manifests)
    return {
        name: (
            node["metadata"]["labels"]["nvidia.com/device-plugin.config"],
            node["metadata"]["labels"]["nvidia.com/mig.config"],
        )
        for name, node in nodes.items()
    }


def test_nodes_of_a_pool_that_agree_share_a_config_named_after_the_pool() -> None:
    spec = _spec(_node("a", _h100(1), pool="ts"), _node("b", _h100(1), pool="ts"))
    names = _names(
        spec,
        _gpu("a", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 2)),
        _gpu("b", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 2)),
    )
    assert names == {"a": ("ts", "all-disabled"), "b": ("ts", "all-disabled")}


def test_nodes_of_a_pool_that_disagree_get_configs_named_after_themselves() -> None:
    spec = _spec(_node("a", _h100(1), pool="ts"), _node("b", _h100(1), pool="ts"))
    names = _names(
        spec,
        _gpu("a", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 2)),
        _gpu("b", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 3)),
    )
    assert names == {"a": ("a", "all-disabled"), "b": ("b", "all-disabled")}


def test_nodes_that_need_nothing_special_get_the_defaults_whatever_their_pool() -> None:
    spec = _spec(_node("a", _h100(1), pool="p"), _node("b", _h100(2)))
    names = _names(spec, _gpu("a", 0, Mode.DEDICATED, _whole("w")))
    assert names == {"a": ("default", "all-disabled"), "b": ("default", "all-disabled")}


def test_a_pool_less_mig_node_gets_a_layout_named_after_it_with_devices_all() -> None:
    spec = _spec(_node("solo", _h100(2)))
    plan = _plan(
        spec,
        _gpu("solo", 0, Mode.MIG, _slice("a", "2g.20gb", 0)),
        _gpu("solo", 1, Mode.MIG, _slice("b", "2g.20gb", 2)),
    )
    rendered = node_config(spec, plan)
    _, mig_doc, nodes = parse_node_config(rendered.manifests)
    assert nodes["solo"]["metadata"]["labels"]["nvidia.com/mig.config"] == "solo"
    assert mig_doc["mig-configs"]["solo"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"2g.20gb": 1}}
    ]


def test_profiles_of_one_gpu_are_counted_in_catalog_order() -> None:
    spec = _spec(_node("n", _h100(1)))
    plan = _plan(
        spec,
        _gpu(
            "n",
            0,
            Mode.MIG,
            _slice("a", "1g.10gb", 3),
            _slice("b", "3g.40gb", 4),
            _slice("a", "1g.10gb", 2, 1),
            _slice("c", "2g.20gb", 0),
        ),
    )
    _, mig_doc, _ = parse_node_config(node_config(spec, plan).manifests)
    assert mig_doc["mig-configs"]["n"][0]["mig-devices"] == {
        "1g.10gb": 2,
        "2g.20gb": 1,
        "3g.40gb": 1,
    }
    assert list(mig_doc["mig-configs"]["n"][0]["mig-devices"]) == ["1g.10gb", "2g.20gb", "3g.40gb"]


@pytest.mark.parametrize(
    ("nodes", "gpus", "clash"),
    [
        # a node called `default` that shares: its config cannot take the reserved name
        ([_node("default", _h100(1))], [("default", Mode.MPS)], "'default'"),
        # pool `b`'s config and node b's config would both be called `b`
        (
            [_node("a", _h100(1), pool="b"), _node("b", _h100(1))],
            [("a", Mode.MPS), ("b", Mode.TIMESLICE)],
            "'b'",
        ),
    ],
)
def test_config_names_that_collide_are_refused(
    nodes: list[dict[str, object]], gpus: list[tuple[str, Mode]], clash: str
) -> None:
    spec = _spec(*nodes)
    views = [_gpu(node, 0, mode, *_shared(mode, 2)) for node, mode in gpus]
    with pytest.raises(KubeRenderError, match=f"would both be named {clash}"):
        node_config(spec, _plan(spec, *views))


def test_pooled_nodes_are_tainted_and_pool_less_nodes_take_every_pool() -> None:
    spec = _spec(
        _node("pooled", _h100(1), pool="serve"),
        _node("free", _h100(1)),
        _node("lent", _h100(1), _h100(1, pool="bursty"), pool="serve"),
    )
    rendered = node_config(spec, _plan(spec))
    _, _, nodes = parse_node_config(rendered.manifests)
    pools = {
        name: sorted(k for k in node["metadata"]["labels"] if k.startswith("pool.gpuplex.dev/"))
        for name, node in nodes.items()
    }
    # the planner lets a GPU in no pool take any pool's work, so its node carries every pool
    assert pools == {
        "pooled": ["pool.gpuplex.dev/serve"],
        "free": ["pool.gpuplex.dev/bursty", "pool.gpuplex.dev/serve"],
        "lent": ["pool.gpuplex.dev/bursty", "pool.gpuplex.dev/serve"],
    }
    assert all(nodes[n]["metadata"]["labels"][label] == "true" for n in pools for label in pools[n])
    assert "spec" not in nodes["free"]
    assert nodes["lent"]["spec"]["taints"] == [
        {"key": "gpuplex.dev/pool", "value": "serve", "effect": "NoSchedule"}
    ]
    assert rendered.notes == [
        "node lent: GPU 1 in pool bursty while the node is in pool serve; Kubernetes pools "
        "whole nodes, so the node is labelled for both and pods of either may use any of its "
        "GPUs (the plan's split inside the node is not enforced)"
    ]


def test_a_plan_from_another_fleet_is_refused() -> None:
    spec = _spec(_node("a", _h100(1)))
    other = _spec(_node("z", _h100(1)))
    with pytest.raises(KubeRenderError, match=r"node\(s\) z, which the spec's fleet does not"):
        node_config(spec, _plan(other))


def test_rendering_is_deterministic_and_configs_are_yaml_text() -> None:
    spec = _spec(_node("a", _h100(2), pool="p"))
    plan = _plan(spec, _gpu("a", 0, Mode.MIG, _slice("x", "7g.80gb", 0)))
    first = node_config(spec, plan)
    assert node_config(spec, plan) == first
    for manifest in first.manifests[:2]:
        assert all(isinstance(text, str) for text in manifest["data"].values())


@pytest.mark.parametrize(
    ("indices", "text"),
    [
        ([3], "GPU 3"),
        ([0, 1, 2, 3], "GPUs 0-3"),
        ([5, 0, 2, 6, 7], "GPUs 0, 2, 5-7"),
        ([], "no GPUs"),
    ],
)
def test_gpu_lists_read_as_ranges(indices: list[int], text: str) -> None:
    assert gpu_list(indices) == text
