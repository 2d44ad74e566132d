"""Device-plugin configs, MIG layouts and Node labels rendered from the examples' plans, and from
hand-made plans where one node's GPUs need methods the device plugin cannot run side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import GpuView, MigSlicePlan, Mode, Occupant, Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.node_config import node_config
from gpuplex.specfile import load_spec_file
from tests.unit.kube.gpu_operator_rules import node_config_problems, parse_node_config
from tests.unit.kube.schema import assert_valid

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
H100_MIB = 81559


def _example(name: str) -> tuple[GpuplexSpec, Plan]:
    spec = load_spec_file(EXAMPLES / f"{name}.yaml")
    return spec, make_plan(spec)


def _spec(*nodes: dict[str, Any]) -> GpuplexSpec:
    return GpuplexSpec.model_validate({"fleet": {"nodes": list(nodes)}})


def _node(name: str, *groups: dict[str, Any], pool: str | None = None) -> dict[str, Any]:
    return {"name": name, "pool": pool, "gpus": list(groups)}


def _h100(count: int, mig: str = "auto", pool: str | None = None) -> dict[str, Any]:
    return {"model": "H100-80GB", "count": count, "mig": mig, "pool": pool}


def _occupant(workload: str, replica: int = 0, **kw: Any) -> Occupant:
    return Occupant(tenant="t", workload=workload, replica=replica, **kw)


def _slice(workload: str, profile: str, start: int, replica: int = 0) -> Occupant:
    found = gpu_model("H100-80GB").mig.profile(profile)  # type: ignore[union-attr]
    assert found is not None
    mig = MigSlicePlan(
        profile=profile,
        profile_id=found.profile_id,
        start_slot=start,
        size_slots=found.memory_slices,
    )
    return _occupant(workload, replica, mig=mig, memory_mib=found.memory_mib)


def _gpu(
    node: str, index: int, mode: Mode | None, *occupants: Occupant, pool: str | None = None
) -> GpuView:
    return GpuView(
        node=node,
        index=index,
        model="H100-80GB",
        pool=pool,
        mode=mode,
        memory_mib=H100_MIB,
        occupants=list(occupants),
    )


def _plan(spec: GpuplexSpec, *gpus: GpuView) -> Plan:
    """The spec's empty plan with these GPU views instead: node_config reads only plan.gpus."""
    views = {(g.node, g.index): g for g in gpus}
    base = make_plan(spec)
    return base.model_copy(update={"gpus": [views.get((g.node, g.index), g) for g in base.gpus]})


def _shared(mode: Mode, count: int) -> list[Occupant]:
    return [
        _occupant(
            "share",
            r,
            memory_mib=8192,
            thread_percent=20 if mode is Mode.MPS else None,
        )
        for r in range(count)
    ]


def _whole(workload: str) -> Occupant:
    return _occupant(workload, memory_mib=H100_MIB)


# --- the examples ---------------------------------------------------------------------------


def test_the_kubernetes_example_renders_a_config_per_sharing_method() -> None:
    spec, plan = _example("kubernetes-cluster")
    rendered = node_config(spec, plan)
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    assert rendered.notes == []
    plugin, mig_doc, nodes = parse_node_config(rendered.manifests)
    assert [m["kind"] for m in rendered.manifests] == ["ConfigMap"] * 2 + ["Node"] * 4
    assert {m["metadata"]["namespace"] for m in rendered.manifests[:2]} == {"gpu-operator"}
    assert plugin == {
        "default": {"version": "v1", "flags": {"migStrategy": "none"}},
        # the MIG node's pool (long-running) also holds a whole-GPU node: named after the node
        "h100-mig-a": {"version": "v1", "flags": {"migStrategy": "mixed"}},
        "shared": {
            "version": "v1",
            "flags": {"migStrategy": "none", "mpsRoot": "/run/nvidia/mps"},
            "sharing": {
                "mps": {
                    "renameByDefault": True,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                }
            },
        },
        "bursty": {
            "version": "v1",
            "flags": {"migStrategy": "none"},
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": True,
                    "failRequestsGreaterThanOne": True,
                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                }
            },
        },
    }
    assert mig_doc == {
        "version": "v1",
        "mig-configs": {
            "all-disabled": [{"devices": "all", "mig-enabled": False}],
            "h100-mig-a": [
                {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
                {"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 3}},
                # `mig: "on"` GPUs with nothing planned yet stay in MIG mode, offering nothing
                {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": True, "mig-devices": {}},
            ],
        },
    }
    labels = {name: node["metadata"]["labels"] for name, node in nodes.items()}
    assert labels["h100-mig-a"] == {
        "app.kubernetes.io/managed-by": "gpuplex",
        "gpuplex.dev/set": "plan",
        "nvidia.com/device-plugin.config": "h100-mig-a",
        "nvidia.com/mig.config": "h100-mig-a",
        "pool.gpuplex.dev/long-running": "true",
    }
    picked = {
        name: (lab["nvidia.com/device-plugin.config"], lab["nvidia.com/mig.config"])
        for name, lab in labels.items()
    }
    assert picked == {
        "h100-mig-a": ("h100-mig-a", "h100-mig-a"),
        "h100-whole-a": ("default", "all-disabled"),
        "l40s-mps": ("shared", "all-disabled"),
        "a100-batch": ("bursty", "all-disabled"),
    }
    assert nodes["l40s-mps"]["spec"] == {
        "taints": [{"key": "gpuplex.dev/pool", "value": "shared", "effect": "NoSchedule"}]
    }


def test_the_laptop_example_renders_with_a_note_on_the_equal_mps_share() -> None:
    spec, plan = _example("laptop")
    rendered = node_config(spec, plan)
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    plugin, _, nodes = parse_node_config(rendered.manifests)
    # a pool-less node that shares gets a config of its own, and no taint
    assert nodes["laptop"]["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "laptop"
    assert "spec" not in nodes["laptop"]
    assert plugin["laptop"]["sharing"]["mps"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 2}
    ]
    assert rendered.notes == [
        "node laptop GPU 0: alice/notebook#0 was planned 60% of the SMs, but the device plugin "
        "gives each of its 2 MPS replicas per GPU 12282 MiB and 50% of the SMs, so it gets less "
        "than planned"
    ]


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        (
            "saas-single-server",
            [
                "node h100-a: GPUs 0-2 run whole GPUs (northwind/chat-70b, northwind/rerank), "
                "GPUs 3-4 run MIG slices (contoso/embed, contoso/support-bot, "
                "fabrikam/claims-extractor), GPU 5 runs MPS (hobbyists/playground).",
                "shares all full GPUs of a node one way",
                "does not run MPS on a node with MIG enabled",
                "on nodes that run only MPS and no MIG",
            ],
        ),
        (
            "host-demo",
            [
                "node demo: GPU 0 runs MIG slices (acme/chat), GPU 1 runs MPS (hobby/playground).",
                "does not run MPS on a node with MIG enabled",
            ],
        ),
        (
            "enterprise-cluster",
            [
                "node h100-train-a: GPUs 0-3 run whole GPUs",
                "GPU 4 runs MPS (research/eval-server)",
                "node l40s-lab: GPU 0 runs time-slicing (analytics/nightly-etl), GPUs 1-2 run "
                "MPS (notebooks/jupyter).",
                "time-slicing and MPS are mutually exclusive",
            ],
        ),
    ],
)
def test_single_server_examples_are_refused_naming_the_node_and_the_fix(
    example: str, expected: list[str]
) -> None:
    spec, plan = _example(example)
    with pytest.raises(KubeRenderError) as caught:
        node_config(spec, plan)
    message = str(caught.value)
    assert message.startswith("the plan cannot run on Kubernetes as planned:")
    assert "Fix: put the MPS workloads in their own pool" in message
    for part in expected:
        assert part in message


# --- clashes and what may share a node ------------------------------------------------------

TWO = _spec(_node("n", _h100(2), pool="p"))


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (
            [
                _gpu("n", 0, Mode.DEDICATED, _whole("train")),
                _gpu("n", 1, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 2)),
            ],
            "GPU 0 runs whole GPUs (t/train), GPU 1 runs time-slicing (t/share). The NVIDIA device "
            "plugin shares all full GPUs of a node one way (not at all, by MPS or by "
            "time-slicing). Fix: put the time-slicing workloads in their own pool",
        ),
        (
            [
                _gpu("n", 0, Mode.MPS, *_shared(Mode.MPS, 2)),
                _gpu("n", 1, Mode.DEDICATED, _whole("train")),
            ],
            "GPU 0 runs MPS (t/share), GPU 1 runs whole GPUs (t/train).",
        ),
        (
            [
                _gpu("n", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 2)),
                _gpu("n", 1, Mode.MPS, *_shared(Mode.MPS, 3)),
            ],
            "time-slicing and MPS are mutually exclusive",
        ),
        (
            [
                _gpu("n", 0, Mode.MIG, _slice("bot", "3g.40gb", 0)),
                _gpu("n", 1, Mode.MPS, *_shared(Mode.MPS, 2)),
            ],
            "GPU 0 runs MIG slices (t/bot), GPU 1 runs MPS (t/share). The NVIDIA device plugin "
            "does not run MPS on a node with MIG enabled",
        ),
    ],
)
def test_a_node_needing_two_methods_is_refused(gpus: list[GpuView], expected: str) -> None:
    with pytest.raises(KubeRenderError, match="node n: ") as caught:
        node_config(TWO, _plan(TWO, *gpus))
    assert expected in str(caught.value)


def test_mps_beside_a_gpu_held_in_mig_mode_is_refused_with_both_fixes() -> None:
    spec = _spec(_node("n", _h100(1, "on"), _h100(1, "off")))
    with pytest.raises(KubeRenderError) as caught:
        node_config(spec, _plan(spec, _gpu("n", 1, Mode.MPS, *_shared(Mode.MPS, 2))))
    message = str(caught.value)
    assert 'GPU 0 is held in MIG mode (mig: "on")' in message
    assert 'or set `mig: "auto"` or `"off"` on the GPUs held in MIG mode' in message


def test_every_clashing_node_is_named_in_one_error() -> None:
    spec = _spec(_node("a", _h100(2)), _node("b", _h100(2)))
    gpus = [
        _gpu(node, i, mode, *_shared(mode, 2))
        for node in ("a", "b")
        for i, mode in enumerate([Mode.MPS, Mode.TIMESLICE])
    ]
    with pytest.raises(KubeRenderError) as caught:
        node_config(spec, _plan(spec, *gpus))
    lines = str(caught.value).splitlines()
    assert [line[:9] for line in lines[1:]] == ["- node a:", "- node b:"]


@pytest.mark.parametrize(
    ("full_mode", "sharing"), [(Mode.DEDICATED, None), (Mode.TIMESLICE, "timeSlicing")]
)
def test_mig_slices_share_a_node_with_whole_or_time_sliced_gpus(
    full_mode: Mode, sharing: str | None
) -> None:
    spec = _spec(_node("n", _h100(2), pool="p"))
    occupants = [_whole("w")] if full_mode is Mode.DEDICATED else _shared(full_mode, 5)
    plan = _plan(
        spec,
        _gpu("n", 0, Mode.MIG, _slice("a", "1g.10gb", 0), _slice("a", "1g.10gb", 1, 1)),
        _gpu("n", 1, full_mode, *occupants),
    )
    rendered = node_config(spec, plan)
    assert_valid(rendered.manifests)
    assert node_config_problems(spec, rendered.manifests) == []
    plugin, mig_doc, _ = parse_node_config(rendered.manifests)
    assert plugin["p"]["flags"]["migStrategy"] == "mixed"
    if sharing is None:
        assert "sharing" not in plugin["p"]
    else:
        assert plugin["p"]["sharing"][sharing]["resources"] == [
            {"name": "nvidia.com/gpu", "replicas": 5}
        ]
    assert mig_doc["mig-configs"]["p"] == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2}},
        {"devices": [1], "mig-enabled": False},
    ]


def test_shared_gpus_get_at_least_two_replicas_and_the_most_occupants_of_one_gpu() -> None:
    spec = _spec(_node("n", _h100(3), pool="p"))
    one = node_config(spec, _plan(spec, _gpu("n", 0, Mode.TIMESLICE, *_shared(Mode.TIMESLICE, 1))))
    plugin, _, _ = parse_node_config(one.manifests)
    assert plugin["p"]["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 2
    many = _plan(
        spec,
        _gpu("n", 0, Mode.MPS, *_shared(Mode.MPS, 3)),
        _gpu("n", 2, Mode.MPS, *_shared(Mode.MPS, 5)),
    )
    plugin, _, _ = parse_node_config(node_config(spec, many).manifests)
    assert plugin["p"]["sharing"]["mps"]["resources"][0]["replicas"] == 5


def test_an_mps_replica_planned_more_than_the_equal_share_is_noted() -> None:
    spec = _spec(_node("n", _h100(1)))
    big = _occupant("big", memory_mib=30000, thread_percent=50)
    small = _occupant("small", memory_mib=20000, thread_percent=25)
    rendered = node_config(spec, _plan(spec, _gpu("n", 0, Mode.MPS, big, small, small)))
    # 3 replicas: 81559 // 3 = 27186 MiB and 100 // 3 = 33 %
    assert rendered.notes == [
        "node n GPU 0: t/big#0 was planned 30000 MiB of memory and 50% of the SMs, but the "
        "device plugin gives each of its 3 MPS replicas per GPU 27186 MiB and 33% of the SMs, "
        "so it gets less than planned"
    ]
