"""Where gpuplex's own server and gateway may run (`kube render --self`): the `node_selector` and
`tolerations` options on both pods, and the note that says when no fleet node could take them
(every pooled node keeps other pods off with its `gpuplex.dev/pool` taint)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st
from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.errors import KubeRenderError
from gpuplex.kube.render import render_self
from gpuplex.kube.self_manifests import SelfOptions, self_manifests
from gpuplex.kube.self_scheduling import toleration
from gpuplex.specfile import load_spec_file
from tests.unit.kube.schema import assert_valid

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = ROOT / "examples" / "kubernetes-cluster.yaml"
NOTE = "gpuplex's server and gateway pods fit on no fleet node"


def _fleet(*pools: str | None) -> GpuplexSpec:
    """A fleet of one-GPU nodes `node-0`, `node-1`, ... in the given pools (None: in none); with
    no pools, a fleet the host discovers (no node listed)."""
    nodes: list[dict[str, Any]] = []
    for index, pool in enumerate(pools):
        node: dict[str, Any] = {"name": f"node-{index}", "gpus": [{"model": "L40S"}]}
        if pool is not None:
            node["pool"] = pool
        nodes.append(node)
    spec = validate_spec({"fleet": {"nodes": nodes} if nodes else {"discover": True}})
    assert isinstance(spec, GpuplexSpec), spec
    return spec


def _notes(spec: GpuplexSpec, **options: Any) -> list[str]:
    return render_self(spec, SelfOptions(**options)).notes


def _pod_specs(options: SelfOptions) -> dict[str, dict[str, Any]]:
    manifests = self_manifests(load_spec_file(CLUSTER), options)
    return {
        m["metadata"]["name"]: m["spec"]["template"]["spec"]
        for m in manifests
        if m["kind"] == "Deployment"
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "gpuplex.dev/pool=serving:NoSchedule",
            {"key": "gpuplex.dev/pool", "operator": "Equal", "value": "serving", "effect": "NoSchedule"},
        ),
        (
            "node-role.kubernetes.io/control-plane:NoSchedule",
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        ),
        ("dedicated", {"key": "dedicated", "operator": "Exists"}),
        (" gpuplex.dev/pool ", {"key": "gpuplex.dev/pool", "operator": "Exists"}),
        ("team=ml", {"key": "team", "operator": "Equal", "value": "ml"}),
    ],
)  # fmt: skip
def test_a_toleration_is_read_as_kubectl_taint_writes_a_taint(
    text: str, expected: dict[str, str]
) -> None:
    assert toleration(text) == expected


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (SelfOptions(tolerations=("gpuplex.dev/pool=a:Sometimes",)), "effect 'Sometimes'"),
        (SelfOptions(tolerations=("gpuplex.dev/pool=:NoSchedule",)), "'' is not a taint value"),
        (SelfOptions(tolerations=("no key!",)), "'no key!' is not a taint key"),
        (SelfOptions(tolerations=(":NoSchedule",)), "'' is not a taint key"),
        (SelfOptions(node_selector={"Bad Key": "x"}), "node selector key 'Bad Key'"),
        (SelfOptions(node_selector={"zone": "not ok"}), "node selector value 'not ok' of zone"),
    ],
)
def test_bad_scheduling_options_are_refused_with_what_is_wrong(
    options: SelfOptions, words: str
) -> None:
    with pytest.raises(KubeRenderError, match=re.escape(words)):
        self_manifests(load_spec_file(CLUSTER), options)


def test_both_pods_get_the_node_selector_and_tolerations_and_stay_valid() -> None:
    options = SelfOptions(
        node_selector={"node-role.example.org/system": "true", "kubernetes.io/os": "linux"},
        tolerations=("gpuplex.dev/pool=long-running:NoSchedule", "example.org/dedicated"),
    )
    pods = _pod_specs(options)
    assert sorted(pods) == ["gpuplex-gateway", "gpuplex-server"]
    for pod in pods.values():
        assert pod["nodeSelector"] == {
            "kubernetes.io/os": "linux",
            "node-role.example.org/system": "true",
        }
        assert pod["tolerations"] == [
            {
                "key": "gpuplex.dev/pool",
                "operator": "Equal",
                "value": "long-running",
                "effect": "NoSchedule",
            },
            {"key": "example.org/dedicated", "operator": "Exists"},
        ]
    assert_valid(self_manifests(load_spec_file(CLUSTER), options))


def test_without_the_options_the_pods_neither_select_nor_tolerate() -> None:
    for pod in _pod_specs(SelfOptions()).values():
        assert "nodeSelector" not in pod
        assert "tolerations" not in pod


def test_a_fleet_of_pooled_nodes_gets_one_note_naming_each_node_its_taint_and_the_fix() -> None:
    notes = _notes(load_spec_file(CLUSTER))
    assert len(notes) == 1
    note = notes[0]
    assert note.startswith(NOTE)
    assert "h100-mig-a, h100-whole-a: tainted gpuplex.dev/pool=long-running:NoSchedule" in note
    assert "l40s-mps: tainted gpuplex.dev/pool=shared:NoSchedule" in note
    assert "a100-batch: tainted gpuplex.dev/pool=bursty:NoSchedule" in note
    assert "stay Pending" in note
    assert (
        "--set tolerations=gpuplex.dev/pool=POOL:NoSchedule (pools: bursty, long-running, shared)"
        in note
    )
    assert "--set node_selector=KEY=VALUE" in note
    assert "warning" not in note.lower()  # the real-cluster test reads stderr for warnings


@pytest.mark.parametrize(
    "options",
    [
        {"tolerations": ("gpuplex.dev/pool=shared:NoSchedule",)},
        {"tolerations": ("gpuplex.dev/pool",)},  # every pool, every effect
        {"tolerations": ("gpuplex.dev/pool:NoSchedule",)},
        {
            "tolerations": ("gpuplex.dev/pool=bursty:NoSchedule",),
            "node_selector": {"kubernetes.io/hostname": "a100-batch"},
        },
        {
            "tolerations": ("gpuplex.dev/pool=shared",),
            "node_selector": {"pool.gpuplex.dev/shared": "true"},
        },
        # a label gpuplex does not set may be on any node: no note
        {"tolerations": ("gpuplex.dev/pool",), "node_selector": {"example.org/tier": "system"}},
    ],
)
def test_no_note_where_a_fleet_node_can_take_the_pods(options: dict[str, Any]) -> None:
    assert _notes(load_spec_file(CLUSTER), **options) == []


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        # a toleration of another effect, key or value does not lift the pool taint
        ({"tolerations": ("gpuplex.dev/pool:PreferNoSchedule",)}, "tainted gpuplex.dev/pool="),
        ({"tolerations": ("gpuplex.dev/pools",)}, "tainted gpuplex.dev/pool="),
        ({"tolerations": ("gpuplex.dev/pool=batch",)}, "tainted gpuplex.dev/pool="),
        # the pool is tolerated but the selector names a node of another pool
        (
            {
                "tolerations": ("gpuplex.dev/pool=shared:NoSchedule",),
                "node_selector": {"kubernetes.io/hostname": "a100-batch"},
            },
            "l40s-mps: not labelled kubernetes.io/hostname=a100-batch",
        ),
        # the selector names a pool no node serves
        (
            {"tolerations": ("gpuplex.dev/pool",), "node_selector": {"pool.gpuplex.dev/gold": "true"}},
            "not labelled pool.gpuplex.dev/gold=true",
        ),
        # a node outside the fleet
        (
            {"tolerations": ("gpuplex.dev/pool",), "node_selector": {"kubernetes.io/hostname": "cpu-1"}},
            "not labelled kubernetes.io/hostname=cpu-1",
        ),
    ],
)  # fmt: skip
def test_the_note_says_why_no_fleet_node_can_take_the_pods(
    options: dict[str, Any], reason: str
) -> None:
    notes = _notes(load_spec_file(CLUSTER), **options)
    assert len(notes) == 1
    assert notes[0].startswith(NOTE)
    assert reason in notes[0]


def test_a_node_in_no_pool_takes_the_pods_and_an_empty_fleet_says_nothing() -> None:
    assert _notes(_fleet("serving", None)) == []
    assert _notes(_fleet()) == []


@given(
    pools=st.lists(st.sampled_from([None, "a", "b", "c"]), min_size=1, max_size=5),
    tolerated=st.sets(st.sampled_from(["a", "b", "c"])),
)
def test_a_note_exactly_when_every_node_is_in_a_pool_not_tolerated(
    pools: list[str | None], tolerated: set[str]
) -> None:
    tolerations = tuple(f"gpuplex.dev/pool={pool}:NoSchedule" for pool in sorted(tolerated))
    notes = _notes(_fleet(*pools), tolerations=tolerations)
    blocked = all(pool is not None and pool not in tolerated for pool in pools)
    assert bool(notes) == blocked
    for index, pool in enumerate(pools):
        if blocked:
            assert f"node-{index}" in notes[0]
            assert f"gpuplex.dev/pool={pool}:NoSchedule" in notes[0]


def test_the_cli_reads_both_options_and_prints_the_note_on_stderr() -> None:
    runner = CliRunner()
    blocked = runner.invoke(app, ["kube", "render", str(CLUSTER), "--self"])
    assert blocked.exit_code == 0, blocked.output
    assert f"note: {NOTE}" in blocked.stderr
    assert "nodeSelector" not in blocked.stdout

    placed = runner.invoke(
        app,
        [
            "kube", "render", str(CLUSTER), "--self",
            "--set", "tolerations=gpuplex.dev/pool=shared:NoSchedule, example.org/dedicated",
            "--set", "node_selector=kubernetes.io/hostname=l40s-mps",
        ],
    )  # fmt: skip
    assert placed.exit_code == 0, placed.output
    assert NOTE not in placed.stderr
    assert placed.stdout.count("kubernetes.io/hostname: l40s-mps") == 2
    assert placed.stdout.count("value: shared") == 2
    assert placed.stdout.count("key: example.org/dedicated") == 2
