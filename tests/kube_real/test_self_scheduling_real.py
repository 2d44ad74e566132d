"""`gpuplex kube render --self` on a real control plane whose every fleet node is in a pool: the
server and gateway pods stay unscheduled, with kube-scheduler naming the pool taint, exactly when
render says no fleet node could take them; with `tolerations` (and `node_selector`) kube-scheduler
binds them to the node those options allow.

The fleet's two nodes carry what gpuplex gives them (`node_manifest`: the pool labels and the
`gpuplex.dev/pool` taint) and one more taint, `gpuplex.test/self-scheduling`, that every pod here
tolerates and no other test's pod does: the control plane is the session's, shared with the other
kube_real tests, and their pods must not land on these nodes. Each case renders into a namespace
of its own and applies only the namespaced objects the pods need (Namespace, ServiceAccounts, the
spec ConfigMap, Deployments), under a set label of its own, so that no `kube apply --self` of
another test prunes them or is changed by them.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.naming import NAME_LABEL, SET_LABEL, Manifest
from gpuplex.kube.nodes import node_manifest
from gpuplex.kube.render import render_self
from gpuplex.kube.self_manifests import SelfOptions
from gpuplex.kube.self_pods import GATEWAY, SERVER
from tests.kube_real.cluster import ControlPlane

NODES = {"self-sched-a": "serving", "self-sched-b": "batch"}
ISOLATION = "gpuplex.test/self-scheduling"
TEST_SET = "self-scheduling-test"
APPLIED_KINDS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps/{name}",
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
}
WAIT_S = 60.0


def _spec(namespace: str) -> GpuplexSpec:
    nodes = [
        {"name": name, "pool": pool, "cpu_cores": 16, "memory_gib": 64, "gpus": [{"model": "L40S"}]}
        for name, pool in NODES.items()
    ]
    spec = validate_spec({"fleet": {"nodes": nodes}, "kubernetes": {"system_namespace": namespace}})
    assert isinstance(spec, GpuplexSpec), spec
    return spec


def _send(admin: ClientTransport, method: str, path: str, body: Any, content_type: str) -> Reply:
    query = [("fieldManager", "gpuplex-test"), ("force", "true")] if "apply" in content_type else []
    return admin.send(method, path, query=query, body=json.dumps(body), content_type=content_type)


@pytest.fixture(scope="module")
def admin(kube_cluster: ControlPlane) -> Iterator[ClientTransport]:
    """The cluster with the two pooled nodes, Ready, tainted as gpuplex taints them."""
    spec = _spec("unused")
    with connect(kube_cluster.kubeconfig) as transport:
        for node in spec.fleet.nodes:
            wanted = node_manifest(
                spec, node, device_plugin_config="l40s", mig_config="all-disabled"
            )
            # what the kubelet labels every node with
            wanted["metadata"]["labels"]["kubernetes.io/hostname"] = node.name
            created = _send(transport, "POST", "/api/v1/nodes", wanted, "application/json")
            assert created.status == 201, created.text
            status = {
                "status": {
                    "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                }
            }
            path = f"/api/v1/nodes/{node.name}"
            patched = _send(
                transport, "PATCH", path + "/status", status, "application/merge-patch+json"
            )
            assert patched.status == 200, patched.text
            # gpuplex's pool taint and the isolation taint; the API server's not-ready taint goes
            # (no node-lifecycle controller runs to lift it)
            taints = [*wanted["spec"]["taints"], {"key": ISOLATION, "effect": "NoSchedule"}]
            retainted = _send(
                transport,
                "PATCH",
                path,
                {"spec": {"taints": taints}},
                "application/merge-patch+json",
            )
            assert retainted.status == 200, retainted.text
            assert {t["key"] for t in retainted.body["spec"]["taints"]} == {
                "gpuplex.dev/pool",
                ISOLATION,
            }
        yield transport


def _apply_self(admin: ClientTransport, manifests: list[Manifest]) -> None:
    for manifest in manifests:
        if manifest["kind"] not in APPLIED_KINDS:
            continue
        meta = manifest["metadata"]
        body = {**manifest, "metadata": {**meta, "labels": {**meta["labels"], SET_LABEL: TEST_SET}}}
        path = APPLIED_KINDS[manifest["kind"]].format(
            name=meta["name"], namespace=meta.get("namespace", "")
        )
        applied = _send(admin, "PATCH", path, body, "application/apply-patch+yaml")
        assert applied.status in (200, 201), f"{manifest['kind']}/{meta['name']}: {applied.text}"


def _pods(admin: ClientTransport, namespace: str) -> dict[str, Manifest]:
    """The namespace's pods by the Deployment they belong to (one replica each)."""
    reply = admin.send("GET", f"/api/v1/namespaces/{namespace}/pods")
    assert reply.status == 200, reply.text
    pods: dict[str, Manifest] = {}
    for pod in reply.body["items"]:
        pods[pod["metadata"]["labels"][NAME_LABEL]] = pod
    return pods


def _wait(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {WAIT_S:.0f} s")
        time.sleep(0.5)
    return result


def _unschedulable(pod: Manifest) -> str | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message", ""))
    return None


def test_pods_tolerating_no_pool_stay_unscheduled_as_render_said(admin: ClientTransport) -> None:
    namespace = "gpuplex-self-blocked"
    rendered = render_self(_spec(namespace), SelfOptions(tolerations=(ISOLATION,)))
    assert len(rendered.notes) == 1
    assert "fit on no fleet node" in rendered.notes[0]
    _apply_self(admin, rendered.manifests)

    def refused() -> dict[str, str] | None:
        reasons = {name: _unschedulable(pod) for name, pod in _pods(admin, namespace).items()}
        found = {name: reason for name, reason in reasons.items() if reason is not None}
        return found if len(found) == 2 else None

    messages = _wait("the scheduler to refuse both pods", refused)
    assert sorted(messages) == [GATEWAY, SERVER]
    for message in messages.values():
        # "0/2 nodes are available: 2 node(s) had untolerated taint(s)" (more nodes where the
        # other kube_real tests made theirs): every node refuses for a taint, here the pool
        # taint, as the cases below show (tolerating it is all it takes)
        assert re.match(
            r"0/(\d+) nodes are available: \1 node\(s\) had untolerated taint", message
        ), message
    assert not any(pod["spec"].get("nodeName") for pod in _pods(admin, namespace).values())


@pytest.mark.parametrize(
    ("namespace", "options", "node"),
    [
        (
            "gpuplex-self-serving",
            SelfOptions(tolerations=(ISOLATION, "gpuplex.dev/pool=serving:NoSchedule")),
            "self-sched-a",
        ),
        (
            "gpuplex-self-selected",
            SelfOptions(
                tolerations=(ISOLATION, "gpuplex.dev/pool"),
                node_selector={"kubernetes.io/hostname": "self-sched-b"},
            ),
            "self-sched-b",
        ),
    ],
)
def test_pods_the_options_let_on_are_bound_to_that_node(
    admin: ClientTransport, namespace: str, options: SelfOptions, node: str
) -> None:
    rendered = render_self(_spec(namespace), options)
    assert rendered.notes == []
    _apply_self(admin, rendered.manifests)

    def bound() -> dict[str, str] | None:
        pods = _pods(admin, namespace)
        nodes = {name: pod["spec"].get("nodeName") for name, pod in pods.items()}
        return nodes if len(nodes) == 2 and all(nodes.values()) else None

    assert _wait("both pods to be bound", bound) == {SERVER: node, GATEWAY: node}
