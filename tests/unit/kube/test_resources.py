"""The kind table: URL paths as the Kubernetes API serves them, the apply and prune orders, and a
refusal for a kind gpuplex does not know."""

from __future__ import annotations

import pytest

from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import PLAN_SET, SELF_SET, Manifest
from gpuplex.kube.resources import (
    KINDS,
    apply_order,
    key_id,
    kind_of,
    object_key,
    prunable_kinds,
)


def manifest(api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest:
    meta = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


@pytest.mark.parametrize(
    ("api_version", "kind", "namespace", "path"),
    [
        ("v1", "Namespace", None, "/api/v1/namespaces/t-a"),
        ("v1", "Node", None, "/api/v1/nodes/t-a"),
        ("v1", "ConfigMap", "gpu-operator", "/api/v1/namespaces/gpu-operator/configmaps/t-a"),
        ("apps/v1", "Deployment", "ns", "/apis/apps/v1/namespaces/ns/deployments/t-a"),
        ("batch/v1", "Job", "ns", "/apis/batch/v1/namespaces/ns/jobs/t-a"),
        (
            "scheduling.k8s.io/v1",
            "PriorityClass",
            None,
            "/apis/scheduling.k8s.io/v1/priorityclasses/t-a",
        ),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicyBinding",
            None,
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/t-a",
        ),
        (
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            "ns",
            "/apis/autoscaling/v2/namespaces/ns/horizontalpodautoscalers/t-a",
        ),
        (
            "monitoring.coreos.com/v1",
            "ServiceMonitor",
            "ns",
            "/apis/monitoring.coreos.com/v1/namespaces/ns/servicemonitors/t-a",
        ),
    ],
)
def test_object_paths(api_version: str, kind: str, namespace: str | None, path: str) -> None:
    found = kind_of(manifest(api_version, kind, "t-a", namespace))
    assert found.object_path("t-a", namespace) == path


def test_collection_paths_and_resource_names() -> None:
    deployments = kind_of(manifest("apps/v1", "Deployment", "x", "ns"))
    assert deployments.collection_path() == "/apis/apps/v1/deployments"
    assert deployments.collection_path("ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert deployments.resource == "deployments.apps"
    config_maps = kind_of(manifest("v1", "ConfigMap", "x", "ns"))
    assert config_maps.resource == "configmaps"
    assert config_maps.group == ""


def test_names_are_quoted_in_paths() -> None:
    node = kind_of(manifest("v1", "Node", "a/b"))
    assert node.object_path("a/b c", None) == "/api/v1/nodes/a%2Fb%20c"


def test_a_namespaced_object_without_a_namespace_is_refused() -> None:
    config_maps = kind_of(manifest("v1", "ConfigMap", "x"))
    with pytest.raises(KubeRenderError, match=r"has no metadata\.namespace"):
        config_maps.object_path("x", None)


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(KubeRenderError, match="apps/v1 StatefulSet 'db'"):
        kind_of(manifest("apps/v1", "StatefulSet", "db", "ns"))
    with pytest.raises(KubeRenderError, match="extensions/v1beta1 Deployment"):
        kind_of(manifest("extensions/v1beta1", "Deployment", "db", "ns"))


def test_apply_order_namespaces_cluster_namespaced_custom_keeping_render_order() -> None:
    rendered = [
        manifest("monitoring.coreos.com/v1", "ServiceMonitor", "sm", "ns"),
        manifest("apps/v1", "Deployment", "d2", "ns"),
        manifest("v1", "ConfigMap", "c", "ns"),
        manifest("scheduling.k8s.io/v1", "PriorityClass", "p"),
        manifest("v1", "Namespace", "ns"),
        manifest("apps/v1", "Deployment", "d1", "ns"),
        manifest("v1", "Node", "n"),
    ]
    ordered = [m["metadata"]["name"] for _, m in apply_order(rendered)]
    assert ordered == ["ns", "p", "n", "d2", "c", "d1", "sm"]


def test_prune_order_never_nodes_and_namespaces_last() -> None:
    plan = [kind.kind for kind in prunable_kinds(PLAN_SET)]
    own = [kind.kind for kind in prunable_kinds(SELF_SET)]
    assert "Node" not in plan
    assert plan[-1] == own[-1] == "Namespace"
    assert plan.index("ConfigMap") < plan.index("PriorityClass")
    assert own.index("ServiceMonitor") < own.index("ConfigMap") < own.index("ClusterRole")
    # each set prunes only its own kinds: the reconciler needs no rights on gpuplex's own RBAC
    assert "ClusterRole" not in plan
    assert "ServiceMonitor" not in plan
    assert "Job" not in own
    assert set(plan) | set(own) == {kind.kind for kind in KINDS if kind.kind != "Node"}


def test_keys_and_ids() -> None:
    config_maps = kind_of(manifest("v1", "ConfigMap", "x", "ns"))
    key = object_key(config_maps, {"metadata": {"name": "x", "namespace": "ns"}})
    assert key == ("v1", "ConfigMap", "ns", "x")
    assert key_id(key) == "ConfigMap/ns/x"
    assert key_id(("v1", "Node", "", "gpu-a")) == "Node/gpu-a"


def test_the_table_has_one_entry_per_kind() -> None:
    assert len({(kind.api_version, kind.kind) for kind in KINDS}) == len(KINDS)
    assert len({(kind.api_version, kind.plural) for kind in KINDS}) == len(KINDS)
