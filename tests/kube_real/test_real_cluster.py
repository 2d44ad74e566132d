"""`gpuplex kube render | diff | apply` against a real control plane (kube-apiserver with RBAC and
a production cluster's admission plugins, kube-controller-manager, kube-scheduler, etcd), with fake
GPU nodes and no kubelets, and without the Prometheus operator (most clusters run none).

The tests share one cluster and run in file order: the first apply sets up what the later tests
read and change; the last one deletes a tenant.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import KubeApiError
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction, ObjectChange
from gpuplex.kube.naming import PLAN_SET, TENANT_LABEL, WORKLOAD_LABEL, Manifest
from gpuplex.kube.render import render_plan
from gpuplex.kube.sync import apply_set, diff_set
from gpuplex.specfile import load_spec_file
from tests.kube_real.cluster import ControlPlane, kubeconfig_for, send_json
from tests.kube_real.fake_nodes import fake_nodes
from tests.unit.kube.test_admission import asking_for, rendered_pods

EXAMPLE = Path(__file__).parents[2] / "examples" / "kubernetes-cluster.yaml"
GPUPLEX = Path(sys.executable).parent / "gpuplex"
POLICY_DENIAL = "GPU resources the plan gives its tenant"
#: How long the control plane may take to settle: generous, as CI's machine is shared by the
#: suite's other workers.
WAIT_S = 240.0


@dataclass
class Cluster:
    control_plane: ControlPlane
    admin: ClientTransport
    spec: GpuplexSpec
    plan: Plan
    manifests: list[Manifest]
    first_apply: subprocess.CompletedProcess[str]
    first_self_apply: subprocess.CompletedProcess[str]

    def send(self, method: str, path: str, body: Any = None, **query: str) -> Reply:
        return send_json(self.admin, method, path, body, **query)

    def pods(self) -> list[Manifest]:
        reply = self.send("GET", "/api/v1/pods", labelSelector=TENANT_LABEL)
        return [p for p in reply.body["items"] if not p["metadata"].get("deletionTimestamp")]


def gpuplex(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI
        [str(GPUPLEX), "kube", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def cluster(kube_cluster: ControlPlane) -> Iterator[Cluster]:
    spec = load_spec_file(EXAMPLE)
    plan = make_plan(spec)
    manifests = render_plan(spec, plan).manifests
    with connect(kube_cluster.kubeconfig) as admin:
        operator = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": spec.kubernetes.gpu_operator_namespace},
        }
        created = admin.send(
            "POST", "/api/v1/namespaces", body=json.dumps(operator), content_type="application/json"
        )
        assert created.status == 201, created.text  # the GPU operator's, which it installs
        for node, status in fake_nodes(spec, manifests):
            created = admin.send(
                "POST", "/api/v1/nodes", body=json.dumps(node), content_type="application/json"
            )
            assert created.status == 201, created.text
            name = node["metadata"]["name"]
            patched = admin.send(
                "PATCH",
                f"/api/v1/nodes/{name}/status",
                body=json.dumps(status),
                content_type="application/merge-patch+json",
            )
            assert patched.status == 200, patched.text
            # the API server taints a new node not-ready (TaintNodesByCondition); the node
            # lifecycle controller would lift it once Ready, but it does not run without kubelets
            ready = {"spec": {"taints": None}}
            lifted = admin.send(
                "PATCH",
                f"/api/v1/nodes/{name}",
                body=json.dumps(ready),
                content_type="application/merge-patch+json",
            )
            assert lifted.status == 200, lifted.text
        first = gpuplex(kube_cluster, "apply", str(EXAMPLE))
        first_self = gpuplex(kube_cluster, "apply", "--self", str(EXAMPLE))
        yield Cluster(kube_cluster, admin, spec, plan, manifests, first, first_self)


def wait_for(
    what: str,
    check: Any,
    cluster: Cluster,
    timeout: float = WAIT_S,
    explain: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            seen = f"; seen: {explain()}" if explain is not None else ""
            raise AssertionError(
                f"gave up waiting for {what} after {timeout:.0f} s{seen}; the cluster's "
                "warnings:\n" + "\n".join(_warnings(cluster))
            )
        time.sleep(0.5)


def _warnings(cluster: Cluster) -> list[str]:
    """The events that say why pods are missing or unbound: FailedCreate, FailedScheduling."""
    events = cluster.send("GET", "/api/v1/events").body.get("items", [])
    return sorted(
        {
            f"{e['involvedObject']['kind']}/{e['involvedObject'].get('namespace', '')}/"
            f"{e['involvedObject']['name']}: {e.get('reason')}: {e.get('message')}"
            for e in events
            if e.get("type") == "Warning"
        }
    )


def test_apply_succeeds_without_the_prometheus_operator_and_a_second_apply_changes_nothing(
    cluster: Cluster,
) -> None:
    first, first_self = cluster.first_apply, cluster.first_self_apply
    assert first.returncode == 0, first.stderr + first.stdout
    assert first_self.returncode == 0, first_self.stderr + first_self.stdout
    objects = len(cluster.manifests) - 4  # the Nodes exist already: labelled, not created
    assert f"{objects} created, 4 changed" in first.stdout
    assert "skipped ServiceMonitor/gpuplex-system/gpuplex-server" in first_self.stdout
    assert "Prometheus operator" in first_self.stdout
    assert "warning" not in (first.stderr + first_self.stderr).lower()

    again = gpuplex(cluster.control_plane, "apply", str(EXAMPLE))
    again_self = gpuplex(cluster.control_plane, "apply", "--self", str(EXAMPLE))

    assert again.returncode == 0, again.stderr
    assert "changed" not in again.stdout.replace("unchanged", ""), again.stdout
    assert again.stdout.strip().splitlines()[-1] == f"{len(cluster.manifests)} unchanged"
    assert again_self.returncode == 0, again_self.stderr
    assert again_self.stdout.strip().splitlines()[-1].endswith(" unchanged")
    assert "changed" not in again_self.stdout.replace("unchanged", "")
    diff = gpuplex(cluster.control_plane, "diff", str(EXAMPLE))
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.strip().splitlines()[-1] == f"{len(cluster.manifests)} unchanged"


def test_every_rendered_pod_is_admitted_and_bound_to_the_node_the_plan_intends(
    cluster: Cluster,
) -> None:
    planned = Counter((p.tenant, p.workload, p.node) for p in cluster.plan.placements)
    expected = sum(planned.values())

    def bound() -> list[Manifest] | None:
        pods = cluster.pods()
        ready = [p for p in pods if p["spec"].get("nodeName")]
        return ready if len(pods) == expected and len(ready) == expected else None

    def counted() -> str:
        return ", ".join(
            f"{p['metadata']['namespace']}/{p['metadata']['name']}@{p['spec'].get('nodeName')}"
            for p in cluster.pods()
        )

    pods = wait_for(f"{expected} pods bound to nodes", bound, cluster, explain=counted)
    labels = {
        namespace: pod["metadata"]["labels"][TENANT_LABEL]
        for namespace, _, pod in rendered_pods(cluster.spec, cluster.plan)
    }
    placed = Counter(
        (
            labels[pod["metadata"]["namespace"]],
            pod["metadata"]["labels"][WORKLOAD_LABEL],
            pod["spec"]["nodeName"],
        )
        for pod in pods
    )
    assert placed == planned


def test_resource_quota_denies_a_pod_over_the_tenants_gpus(cluster: Cluster) -> None:
    wait_for("the quota to count every pod", lambda: _quota_full(cluster, "support-bot"), cluster)
    namespace, pod = _pod_of(cluster, "support-bot")
    pod["metadata"]["name"] = "one-more"
    reply = cluster.send("POST", f"/api/v1/namespaces/{namespace}/pods", pod, dryRun="All")
    assert reply.status == 403, reply.text
    assert "exceeded quota" in reply.body["message"]


def _quota_full(cluster: Cluster, workload: str) -> bool:
    namespace, _ = _pod_of(cluster, workload)
    reply = cluster.send("GET", f"/api/v1/namespaces/{namespace}/resourcequotas")
    for quota in reply.body["items"]:
        used = quota.get("status", {}).get("used", {})
        hard = quota.get("status", {}).get("hard", {})
        if any(
            k.startswith("requests.nvidia.com/mig") and used.get(k) == v for k, v in hard.items()
        ):
            return True
    return False


def _pod_of(cluster: Cluster, workload: str) -> tuple[str, Manifest]:
    for namespace, name, pod in rendered_pods(cluster.spec, cluster.plan):
        if name == workload:
            pod = copy.deepcopy(pod)
            pod["metadata"]["name"] = f"probe-{workload}"
            return namespace, pod
    raise AssertionError(f"no rendered pod for {workload}")


def _init_container_share(pod: Manifest) -> Manifest:
    pod["spec"]["initContainers"] = [
        {
            "name": "warmup",
            "image": "busybox",
            "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
        }
    ]
    return pod


def _priority(value: str | None) -> Any:
    def change(pod: Manifest) -> Manifest:
        pod["spec"].pop("priorityClassName", None)
        pod["spec"].pop("priority", None)
        if value is not None:
            pod["spec"]["priorityClassName"] = value
        return pod

    return change


BAD_PODS = {
    # why it is refused: (workload whose pod is changed, the change, words of the denial)
    "a MIG profile not granted": (
        "support-bot",
        lambda pod: asking_for(pod, "nvidia.com/mig-7g.80gb"),
        POLICY_DENIAL,
    ),
    "a whole GPU for a MIG-only tenant": (
        "support-bot",
        lambda pod: asking_for(pod, "nvidia.com/gpu"),
        POLICY_DENIAL,
    ),
    "a whole GPU for an MPS tenant": (
        "playground",
        lambda pod: asking_for(pod, "nvidia.com/gpu"),
        POLICY_DENIAL,
    ),
    "a shared GPU in an init container": ("support-bot", _init_container_share, POLICY_DENIAL),
    "another tenant's priority class": (
        "playground",
        _priority("gpuplex-priority-100"),
        "priorityClassName",
    ),
    "no priority class": ("playground", _priority(None), "priorityClassName"),
}


@pytest.mark.parametrize("why", list(BAD_PODS))
def test_the_admission_policy_denies_a_pod_reaching_past_the_plan(
    cluster: Cluster, why: str
) -> None:
    workload, change, words = BAD_PODS[why]
    namespace, pod = _pod_of(cluster, workload)
    # the unchanged pod is refused by the full quota only (the test above), not by the policy
    reply = cluster.send("POST", f"/api/v1/namespaces/{namespace}/pods", change(pod), dryRun="All")
    assert reply.status in (403, 422), reply.text
    assert "ValidatingAdmissionPolicy" in reply.body["message"], reply.body["message"]
    assert words in reply.body["message"]


def test_a_gpu_resource_another_manager_added_shows_in_diff_and_apply_removes_it(
    cluster: Cluster,
) -> None:
    namespace, _ = _pod_of(cluster, "support-bot")
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/support-bot"
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "support-bot",
                            "resources": {"limits": {"nvidia.com/mig-7g.80gb": "1"}},
                        }
                    ],
                    "nodeSelector": {"example.com/rack": "a1"},
                }
            }
        }
    }
    patched = cluster.send(
        "PATCH",
        path,
        patch,
        fieldManager="kubectl-patch",
        content_type="application/strategic-merge-patch+json",
    )
    assert patched.status == 200, patched.text

    changes = diff_set(cluster.admin, cluster.manifests, PLAN_SET)

    [change] = [c for c in changes if c.action is not ObjectAction.UNCHANGED]
    assert change.object_id == f"Deployment/{namespace}/support-bot"
    assert any('"nvidia.com/mig-7g.80gb"' in f and "kubectl-patch" in f for f in change.fields)
    assert any('nodeSelector["example.com/rack"]' in f for f in change.fields)

    applied = apply_set(cluster.admin, cluster.manifests, PLAN_SET)

    assert [c.object_id for c in applied if c.action is ObjectAction.CHANGE] == [change.object_id]
    live = cluster.send("GET", path).body
    [container] = live["spec"]["template"]["spec"]["containers"]
    assert "nvidia.com/mig-7g.80gb" not in container["resources"]["limits"]
    assert "example.com/rack" not in live["spec"]["template"]["spec"]["nodeSelector"]
    assert {c.action for c in diff_set(cluster.admin, cluster.manifests, PLAN_SET)} == {
        ObjectAction.UNCHANGED
    }


def test_a_changed_job_template_is_a_recreate_in_diff_and_a_one_line_refusal_in_apply(
    cluster: Cluster,
) -> None:
    changed = copy.deepcopy(cluster.manifests)
    [job] = [m for m in changed if m["kind"] == "Job" and m["metadata"]["name"] == "finetune"]
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "EPOCHS", "value": "3"}]
    job_id = f"Job/{job['metadata']['namespace']}/finetune"

    changes = {c.object_id: c for c in diff_set(cluster.admin, changed, PLAN_SET)}

    assert changes[job_id].action is ObjectAction.RECREATE
    assert "needs delete and re-create" in changes[job_id].note
    assert any(f.startswith("spec.template.spec.containers") for f in changes[job_id].fields)
    with pytest.raises(KubeApiError) as caught:
        apply_set(cluster.admin, changed, PLAN_SET)
    message = caught.value.message
    assert "spec.template cannot change in place" in message
    assert len(message) < 400
    assert "\n" not in message


def test_the_reconciler_account_can_diff_apply_and_prune(cluster: Cluster, tmp_path: Path) -> None:
    reply = cluster.send(
        "POST",
        "/api/v1/namespaces/gpuplex-system/serviceaccounts/gpuplex-server/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )
    assert reply.status == 201, reply.text
    config = kubeconfig_for(
        tmp_path / "reconciler.kubeconfig",
        cluster.control_plane.server,
        cluster.control_plane.pki.ca.cert,
        token=reply.body["status"]["token"],
    )
    without_embed = [
        m
        for m in cluster.manifests
        if m["metadata"].get("labels", {}).get(WORKLOAD_LABEL) != "embed"
    ]
    removed = len(cluster.manifests) - len(without_embed)
    assert removed >= 2  # a Deployment and a Service

    with connect(config) as reconciler:
        assert {c.action for c in diff_set(reconciler, cluster.manifests, PLAN_SET)} == {
            ObjectAction.UNCHANGED
        }
        pruned = apply_set(reconciler, without_embed, PLAN_SET)
        assert sum(c.action is ObjectAction.PRUNE for c in pruned) == removed
        again = apply_set(reconciler, cluster.manifests, PLAN_SET)  # created anew: needs create
        assert sum(c.action is ObjectAction.CREATE for c in again) == removed


def test_prune_removes_exactly_what_diff_predicts_and_a_terminating_namespace_says_retry_later(
    cluster: Cluster, tmp_path: Path
) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["tenants"] = [t for t in document["tenants"] if t["name"] != "analytics"]
    smaller = tmp_path / "without-analytics.yaml"
    smaller.write_text(yaml.safe_dump(document, sort_keys=False))
    spec = load_spec_file(smaller)
    manifests = render_plan(spec, make_plan(spec)).manifests

    predicted = {
        c.object_id
        for c in diff_set(cluster.admin, manifests, PLAN_SET)
        if c.action is ObjectAction.PRUNE
    }
    pruned = {
        c.object_id
        for c in apply_set(cluster.admin, manifests, PLAN_SET)
        if c.action is ObjectAction.PRUNE
    }

    assert predicted == pruned
    assert "Namespace/tenant-analytics" in pruned
    # its Job's pods are bound to nodes no kubelet runs on: the namespace stays Terminating
    back = gpuplex(cluster.control_plane, "apply", str(EXAMPLE))
    assert back.returncode == 5, back.stdout + back.stderr
    assert "namespace tenant-analytics is still being deleted" in back.stderr
    assert "forbidden" not in back.stderr.lower()


def _changes(changes: list[ObjectChange], action: ObjectAction) -> set[str]:
    return {c.object_id for c in changes if c.action is action}
