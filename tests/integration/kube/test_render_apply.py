"""The renderers' real output applied to the fake API server: every kind they render is one gpuplex
knows how to apply (and the fake serves at the path the real API does), a second look finds
nothing to change, and the plan set and gpuplex's own set never prune each other."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.core.plan import make_plan
from gpuplex.kube.apply import ClientTransport
from gpuplex.kube.diff import ObjectAction
from gpuplex.kube.naming import PLAN_SET, SELF_SET
from gpuplex.kube.render import render_plan, render_self
from gpuplex.kube.self_manifests import SelfOptions
from gpuplex.kube.sync import apply_set, diff_set
from gpuplex.specfile import load_spec_file
from tests.integration.kube import objects
from tests.integration.kube.fake_api import FakeKubeApi

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "kubernetes-cluster.yaml"


def _cluster_with_nodes_and_operator(api: FakeKubeApi) -> None:
    objects.example_cluster(api.put, EXAMPLE)


def test_both_sets_apply_then_diff_clean_and_never_prune_each_other(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    _cluster_with_nodes_and_operator(api)
    spec = load_spec_file(EXAMPLE)
    plan_set = render_plan(spec, make_plan(spec)).manifests
    self_set = render_self(spec, SelfOptions()).manifests

    applied = apply_set(transport, plan_set, PLAN_SET)
    applied_self = apply_set(transport, self_set, SELF_SET)

    assert {c.action for c in applied} <= {ObjectAction.CREATE, ObjectAction.CHANGE}
    assert {c.action for c in applied_self} == {ObjectAction.CREATE}
    nodes = {
        c.object_id for c in applied if c.action is ObjectAction.CHANGE
    }  # labelled and tainted
    assert nodes == {f"Node/{node.name}" for node in spec.fleet.nodes}
    assert {c.action for c in diff_set(transport, plan_set, PLAN_SET)} == {ObjectAction.UNCHANGED}
    assert {c.action for c in diff_set(transport, self_set, SELF_SET)} == {ObjectAction.UNCHANGED}
    assert not [r for r in api.requests if r.method == "DELETE"]


def test_the_cli_applies_the_example(api: FakeKubeApi, kubeconfig: Path) -> None:
    _cluster_with_nodes_and_operator(api)
    result = CliRunner().invoke(
        app, ["kube", "apply", str(EXAMPLE), "--kubeconfig", str(kubeconfig)]
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "created Namespace/tenant-contoso" in result.stdout
    again = CliRunner().invoke(app, ["kube", "diff", str(EXAMPLE), "--kubeconfig", str(kubeconfig)])
    assert again.exit_code == 0, again.output
    assert again.stdout.strip().splitlines()[-1].endswith("unchanged")
    assert "to " not in again.stdout.strip().splitlines()[-1]
