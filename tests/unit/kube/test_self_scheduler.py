"""gpuplex's second scheduler and its extender as Kubernetes objects (`kubernetes.scheduler`,
rendered with `--self`): valid objects, a configuration that sends only GPU pods to an ignorable
extender, least-privilege accounts, an extender only the scheduler reaches, and workloads that name
the scheduler. A real kube-scheduler loads the same configuration in
tests/kube_real/test_scheduler_extender.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from gpuplex.cli.main import app
from gpuplex.core.plan import Target, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.naming import NAME_LABEL, SELF_SET, SET_LABEL, Manifest
from gpuplex.kube.render import render_plan
from gpuplex.kube.self_manifests import SelfOptions, self_manifests
from gpuplex.kube.self_scheduler import CONFIG_KEY, EXTENDER, EXTENDER_PORT
from gpuplex.specfile import load_spec_text
from tests.unit.kube.schema import assert_valid

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = (ROOT / "examples" / "kubernetes-cluster.yaml").read_text()


def _spec(scheduler: str | None) -> GpuplexSpec:
    text = EXAMPLE
    if scheduler is not None:
        text = text.replace(
            "  namespace_prefix: tenant-\n",
            f"  namespace_prefix: tenant-\n  scheduler: {scheduler}\n",
        )
    return load_spec_text(text, source="kubernetes-cluster.yaml")


def _objects(scheduler: str | None = "{}") -> list[Manifest]:
    return self_manifests(_spec(scheduler), SelfOptions(image="example.org/gpuplex:9"))


def _one(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _config(manifests: list[Manifest], name: str = "gpuplex-scheduler") -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(_one(manifests, "ConfigMap", name)["data"][CONFIG_KEY])
    return config


def test_without_a_scheduler_in_the_spec_nothing_of_it_is_rendered() -> None:
    names = {m["metadata"]["name"] for m in _objects(None)}
    assert not {n for n in names if "scheduler" in n}


def test_every_object_is_valid_and_in_the_self_set() -> None:
    manifests = _objects()
    assert_valid(manifests)
    for manifest in manifests:
        assert manifest["metadata"]["labels"][SET_LABEL] == SELF_SET
    reader = _one(manifests, "RoleBinding", "gpuplex-scheduler-authentication-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"


def test_the_configuration_sends_only_gpu_pods_to_an_ignorable_extender_by_name() -> None:
    config = _config(_objects("{name: gpu-sched, policy: fgd-balanced}"), "gpu-sched")
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["profiles"] == [{"schedulerName": "gpu-sched"}]
    assert config["leaderElection"]["resourceName"] == "gpu-sched"
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == f"http://{EXTENDER}.gpuplex-system.svc:{EXTENDER_PORT}"
    assert extender["filterVerb"] == "filter"
    assert "prioritizeVerb" not in extender
    assert extender["ignorable"] is True
    assert extender["nodeCacheCapable"] is True
    managed = {r["name"] for r in extender["managedResources"]}
    # whole GPUs and the H100's MIG profiles; shared GPUs (MPS, time-slicing) are not its
    assert {"nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/mig-1g.10gb"} <= managed
    assert "nvidia.com/gpu.shared" not in managed
    assert not any(r["ignoredByScheduler"] for r in extender["managedResources"])


def test_score_mode_prioritizes_beside_kube_schedulers_own_scores() -> None:
    (extender,) = _config(_objects("{mode: score}"))["extenders"]
    assert extender["prioritizeVerb"] == "prioritize"
    assert extender["weight"] == 5
    assert "filterVerb" not in extender


def _parse(command: list[str]) -> dict[str, Any]:
    """The container's arguments, parsed by the real `gpuplex` CLI without running it."""
    assert command[:3] == ["gpuplex", "kube", "extender"]
    group = typer.main.get_command(app)
    kube = group.commands["kube"]  # type: ignore[attr-defined]
    extender = kube.commands["extender"]
    params: dict[str, Any] = extender.make_context("extender", list(command[3:])).params
    return params


def test_the_extender_runs_the_spec_policy_with_arguments_the_cli_accepts() -> None:
    manifests = _objects("{policy: fgd}")
    pod = _one(manifests, "Deployment", EXTENDER)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "example.org/gpuplex:9"
    params = _parse(container["command"])
    assert (params["policy"], params["port"], params["host"]) == ("fgd", EXTENDER_PORT, "0.0.0.0")  # noqa: S104
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": EXTENDER_PORT}


def test_both_pods_run_unprivileged_on_a_read_only_root() -> None:
    manifests = _objects()
    for name in ("gpuplex-scheduler", EXTENDER):
        pod = _one(manifests, "Deployment", name)["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == name
        assert pod["securityContext"]["runAsNonRoot"] is True
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert container["resources"]["limits"]["memory"]


def test_the_extender_may_only_list_nodes_and_pods() -> None:
    manifests = _objects()
    role = _one(manifests, "ClusterRole", EXTENDER)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
    binding = _one(manifests, "ClusterRoleBinding", EXTENDER)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": EXTENDER, "namespace": "gpuplex-system"}
    ]


def test_only_the_scheduler_pods_reach_the_extender() -> None:
    policy = _one(_objects(), "NetworkPolicy", EXTENDER)["spec"]
    assert policy["podSelector"] == {"matchLabels": {NAME_LABEL: EXTENDER}}
    assert policy["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": {NAME_LABEL: "gpuplex-scheduler"}}}],
            "ports": [{"protocol": "TCP", "port": EXTENDER_PORT}],
        }
    ]
    service = _one(_objects(), "Service", EXTENDER)["spec"]
    assert service["selector"] == {NAME_LABEL: EXTENDER}


@pytest.mark.parametrize(("scheduler", "named"), [(None, None), ("{name: gpu-sched}", "gpu-sched")])
def test_the_workloads_name_the_scheduler_when_the_spec_has_one(
    scheduler: str | None, named: str | None
) -> None:
    spec = _spec(scheduler)
    rendered = render_plan(spec, make_plan(spec, target=Target.KUBERNETES))
    templates = [
        m["spec"]["template"]["spec"]
        for m in rendered.manifests
        if m["kind"] in ("Deployment", "Job")
    ]
    assert templates
    assert {t.get("schedulerName") for t in templates} == {named}


@pytest.mark.parametrize(
    ("scheduler", "words"),
    [
        ("{policy: random}", "scheduler.policy"),
        ("{mode: sometimes}", "scheduler.mode"),
        ("{name: Not_A_Label}", "scheduler.name"),
    ],
)
def test_a_bad_scheduler_setting_is_refused_where_it_is(scheduler: str, words: str) -> None:
    from gpuplex.errors import SpecError

    with pytest.raises(SpecError) as refused:
        _spec(scheduler)
    assert words in str(refused.value)
    assert "kubernetes-cluster.yaml:" in str(refused.value)
