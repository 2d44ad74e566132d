"""Queued GPU Jobs on the real control plane with the real Kueue, from `gpuplex kube render`'s own
objects applied by `kube apply`'s own code: every admitted Job's pods are created and bound by
kube-scheduler to a node with the GPU they ask for, and what could never run is refused when it is
created.

The fleet: `kq-l4`, four whole L4s; `kq-h100`, one H100 held in MIG mode (`mig: "on"`) that the
plan leaves empty, so it is cut into the slices the queues need. Three tenants in one team:

    bank    regulated, isolation mig   guarantee 2 x mig 1g.10gb
    studio  isolation dedicated        guarantee 2 GPUs, limit 4
    lab     isolation dedicated        guarantee 2 GPUs, limit 4

No kubelet runs: nodes are fake (tests/kube_real/fake_nodes.py), and a stand-in kubelet finishes
what a kubelet would (a pod being deleted goes at once). The cluster is shared with the other
kube_real modules, so this one uses names of its own (`kq-` namespaces and nodes, its own GPU
operator namespace) and deletes every object it made when it is done.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction
from gpuplex.kube.kueue import LOCAL_QUEUE, QUEUE_NAME_LABEL
from gpuplex.kube.naming import PLAN_SET, QUEUED_PRIORITY_CLASS, Manifest, namespace_for
from gpuplex.kube.render import render_plan
from gpuplex.kube.resources import kind_of, object_key
from gpuplex.kube.sync import apply_set
from tests.kube_real.cluster import kubeconfig_for, send_json, wait_until
from tests.kube_real.fake_nodes import fake_nodes
from tests.kube_real.kueue_manager import KueueManager
from tests.kube_real.pki import client_pair

WAIT_S = 120.0
IMAGE = "registry.k8s.io/pause:3.10"
L4 = "nvidia.com/gpu"
SLICE = "nvidia.com/mig-1g.10gb"

SPEC: dict[str, Any] = {
    "fleet": {
        "nodes": [
            {
                "name": "kq-l4",
                "cpu_cores": 64,
                "memory_gib": 512,
                "gpus": [{"model": "L4", "count": 4}],
            },
            {
                "name": "kq-h100",
                "cpu_cores": 64,
                "memory_gib": 512,
                "gpus": [{"model": "H100-80GB", "count": 1, "mig": "on"}],
            },
        ]
    },
    "tenants": [
        {"name": "bank", "regulated": True, "isolation": "mig"},
        {"name": "studio", "isolation": "dedicated"},
        {"name": "lab", "isolation": "dedicated"},
    ],
    "kubernetes": {
        "namespace_prefix": "kq-",
        "gpu_operator_namespace": "kq-gpu-operator",
        "kueue": {},
    },
    "queues": {
        "organisations": [
            {
                "name": "kq-org",
                "teams": [
                    {
                        "name": "kq-team",
                        "tenants": [
                            {"name": "bank", "guarantee": {"mig": {"1g.10gb": 2}}},
                            {"name": "studio", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}},
                            {"name": "lab", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}},
                        ],
                    }
                ],
            }
        ]
    },
}


@dataclass
class Cluster:
    admin: ClientTransport
    spec: GpuplexSpec
    manifests: list[Manifest]
    directory: Path
    server: str
    ca: Path
    kueue: KueueManager

    def send(self, method: str, path: str, body: Any = None, **query: str) -> Reply:
        return send_json(self.admin, method, path, body, **query)

    def namespace(self, tenant: str) -> str:
        return namespace_for(self.spec, tenant)

    def job(self, tenant: str, name: str) -> Manifest:
        reply = self.send("GET", f"/apis/batch/v1/namespaces/{self.namespace(tenant)}/jobs/{name}")
        assert reply.status == 200, reply.text
        return reply.body

    def pods(self, tenant: str, job: str) -> list[Manifest]:
        reply = self.send(
            "GET",
            f"/api/v1/namespaces/{self.namespace(tenant)}/pods",
            labelSelector=f"batch.kubernetes.io/job-name={job}",
        )
        return [p for p in reply.body["items"] if not p["metadata"].get("deletionTimestamp")]


def queued_job(
    name: str, resource: str, count: int, *, labels: dict[str, str] | None = None
) -> Manifest:
    """A Job as a tenant writes one for its queue: the queue label, the queued priority class,
    created suspended, one pod asking `count` of `resource`."""
    container = {
        "name": "main",
        "image": IMAGE,
        "resources": {"limits": {resource: str(count)}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels or {QUEUE_NAME_LABEL: LOCAL_QUEUE}},
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": QUEUED_PRIORITY_CLASS,
                    "containers": [container],
                }
            },
        },
    }


class StandInKubelet:
    """What the kubelets of the fake nodes would do for the test's pods: a pod being deleted (a
    preempted Job's) is gone once its containers stopped, at once here."""

    def __init__(self, cluster: Cluster, namespaces: list[str]) -> None:
        self.cluster = cluster
        self.namespaces = namespaces
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInKubelet:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stopping.wait(0.5):
            for namespace in self.namespaces:
                self.finish_deleted(namespace)

    def finish_deleted(self, namespace: str) -> None:
        reply = self.cluster.send("GET", f"/api/v1/namespaces/{namespace}/pods")
        for pod in reply.body.get("items", []):
            if pod["metadata"].get("deletionTimestamp"):
                name = pod["metadata"]["name"]
                self.cluster.send(
                    "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", gracePeriodSeconds="0"
                )


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    return wait_until(what, check, timeout)


def _make_nodes(admin: ClientTransport, spec: GpuplexSpec, manifests: list[Manifest]) -> None:
    for node, status in fake_nodes(spec, manifests):
        created = admin.send(
            "POST", "/api/v1/nodes", body=json.dumps(node), content_type="application/json"
        )
        assert created.status == 201, created.text
        name = node["metadata"]["name"]
        for path, body in (
            (f"/api/v1/nodes/{name}/status", status),
            (f"/api/v1/nodes/{name}", {"spec": {"taints": None}}),
        ):
            patched = admin.send(
                "PATCH", path, body=json.dumps(body), content_type="application/merge-patch+json"
            )
            assert patched.status == 200, patched.text


def _delete_everything(cluster: Cluster) -> None:
    """Every object the module made, pods first (no kubelet finishes them), namespaces waited
    for, so the next module finds the cluster as it was."""
    namespaces = [cluster.namespace(t.name) for t in cluster.spec.tenants]
    kubelet = StandInKubelet(cluster, namespaces)
    for namespace in namespaces:
        cluster.send(
            "DELETE",
            f"/apis/batch/v1/namespaces/{namespace}/jobs",
            propagationPolicy="Background",
        )
    for manifest in reversed(cluster.manifests):
        if manifest["kind"] == "Node":
            continue
        kind = kind_of(manifest)
        name, namespace = manifest["metadata"]["name"], manifest["metadata"].get("namespace")
        cluster.send("DELETE", kind.object_path(name, namespace))
    for node in cluster.spec.fleet.nodes:
        cluster.send("DELETE", f"/api/v1/nodes/{node.name}")
    operator = cluster.spec.kubernetes.gpu_operator_namespace
    cluster.send("DELETE", f"/api/v1/namespaces/{operator}")

    def gone() -> bool:
        for namespace in namespaces:
            kubelet.finish_deleted(namespace)
        return all(
            cluster.send("GET", f"/api/v1/namespaces/{n}").status == 404
            for n in [*namespaces, operator]
        )

    wait_for("the module's namespaces to go", gone)


@pytest.fixture(scope="module")
def cluster(kueue: KueueManager, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    spec = validate_spec(SPEC)
    assert isinstance(spec, GpuplexSpec), spec
    manifests = render_plan(spec, make_plan(spec)).manifests
    admin = kueue.admin
    operator = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": spec.kubernetes.gpu_operator_namespace},
    }
    created = admin.send(
        "POST", "/api/v1/namespaces", body=json.dumps(operator), content_type="application/json"
    )
    assert created.status == 201, created.text
    _make_nodes(admin, spec, manifests)
    found = Cluster(
        admin,
        spec,
        manifests,
        tmp_path_factory.mktemp("kueue-jobs"),
        kueue.cluster.server,
        kueue.cluster.pki.ca.cert,
        kueue,
    )
    try:
        apply_set(admin, manifests, PLAN_SET, prune=False)
        wait_for("the Job policy to be enforced", lambda: _refuses_unqueued(found))
        yield found
    finally:
        _delete_everything(found)


def _refuses_unqueued(cluster: Cluster) -> bool:
    unqueued = queued_job("probe", L4, 1, labels={"team": "x"})
    reply = cluster.send(
        "POST",
        f"/apis/batch/v1/namespaces/{cluster.namespace('lab')}/jobs",
        unqueued,
        dryRun="All",
    )
    return reply.status in (403, 422)


@dataclass
class Run:
    cluster: Cluster
    #: (job, its state) after each step: `admitted` once its pods are bound, `held`, `preempted`
    steps: list[tuple[str, dict[str, str]]]
    refused: Reply


def _create(cluster: Cluster, tenant: str, job: Manifest) -> Reply:
    return cluster.send("POST", f"/apis/batch/v1/namespaces/{cluster.namespace(tenant)}/jobs", job)


def _bound(cluster: Cluster, tenant: str, job: str, resource: str, node: str) -> bool:
    """The Job runs: unsuspended, and its pod bound to `node`, asking for `resource`."""
    if cluster.job(tenant, job)["spec"].get("suspend"):
        return False
    pods = cluster.pods(tenant, job)
    return len(pods) == 1 and all(
        p["spec"].get("nodeName") == node
        and resource in p["spec"]["containers"][0]["resources"]["limits"]
        for p in pods
    )


def _held(cluster: Cluster, tenant: str, job: str) -> bool:
    return bool(cluster.job(tenant, job)["spec"].get("suspend")) and not cluster.pods(tenant, job)


@pytest.fixture(scope="module")
def run(cluster: Cluster) -> Iterator[Run]:
    namespaces = [cluster.namespace(t.name) for t in cluster.spec.tenants]
    with StandInKubelet(cluster, namespaces):
        steps: list[tuple[str, dict[str, str]]] = []
        for tenant, name in (("studio", "s-fits"), ("studio", "s-borrows")):
            created = _create(cluster, tenant, queued_job(name, L4, 2))
            assert created.status == 201, created.text
            wait_for(
                f"{name} to run on kq-l4",
                functools.partial(_bound, cluster, tenant, name, L4, "kq-l4"),
            )
            # Kueue orders equal-priority workloads by when they were admitted, in whole seconds:
            # a second apart, s-borrows is the younger, the one reclaim takes back
            time.sleep(1.1)
        steps.append(("s-borrows", {"s-fits": "admitted", "s-borrows": "admitted"}))
        created = _create(cluster, "lab", queued_job("l-reclaims", L4, 2))
        assert created.status == 201, created.text
        wait_for("l-reclaims to run", lambda: _bound(cluster, "lab", "l-reclaims", L4, "kq-l4"))
        wait_for("s-borrows to be stopped", lambda: _held(cluster, "studio", "s-borrows"))
        refused = _create(cluster, "bank", queued_job("b-whole", L4, 1))
        created = _create(cluster, "bank", queued_job("b-mig", SLICE, 1))
        assert created.status == 201, created.text
        yield Run(cluster, steps, refused)


def test_jobs_within_their_guarantee_and_borrowing_get_pods_bound_to_the_right_gpus(
    run: Run,
) -> None:
    cluster = run.cluster
    assert _bound(cluster, "studio", "s-fits", L4, "kq-l4")
    assert run.steps[0][1]["s-borrows"] == "admitted"  # borrowed lab's idle L4s, and ran


def test_the_lender_reclaims_its_gpus_and_the_borrowers_job_waits_again(run: Run) -> None:
    cluster = run.cluster
    assert _bound(cluster, "lab", "l-reclaims", L4, "kq-l4")
    assert _held(cluster, "studio", "s-borrows")
    workloads = cluster.send(
        "GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{cluster.namespace('studio')}/workloads"
    ).body["items"]
    [borrower] = [w for w in workloads if w["metadata"]["name"].startswith("job-s-borrows-")]
    reasons = {c.get("reason") for c in borrower["status"].get("conditions", [])}
    evictions = borrower["status"].get("schedulingStats", {}).get("evictions", [])
    assert "InCohortReclamation" in reasons or any(
        e.get("underlyingCause") == "InCohortReclamation" or e.get("reason") == "Preempted"
        for e in evictions
    ), borrower["status"]
    assert _bound(cluster, "studio", "s-fits", L4, "kq-l4")  # within its guarantee: untouched


def test_a_regulated_tenants_whole_gpu_job_is_refused_at_creation(run: Run) -> None:
    assert run.refused.status in (403, 422), run.refused.text
    message = run.refused.body["message"]
    assert "ValidatingAdmissionPolicy" in message, message
    assert "could never run" in message, message


def test_a_regulated_tenants_mig_job_is_admitted_at_once(run: Run) -> None:
    cluster = run.cluster
    wait_for("b-mig to run on kq-h100", lambda: _bound(cluster, "bank", "b-mig", SLICE, "kq-h100"))


def test_a_tenant_admin_cannot_start_a_job_kueue_holds(run: Run) -> None:
    cluster = run.cluster
    created = _create(cluster, "lab", queued_job("l-waits", L4, 2))
    assert created.status == 201, created.text
    wait_for("l-waits to be held", lambda: _held(cluster, "lab", "l-waits"))
    pair = client_pair(
        cluster.kueue.cluster.pki, cluster.directory / "pki", "alice", "gpuplex:lab:admins"
    )
    config = kubeconfig_for(
        cluster.directory / "alice.kubeconfig", cluster.server, cluster.ca, pair
    )
    with connect(config) as alice:
        reply = alice.send(
            "PATCH",
            f"/apis/batch/v1/namespaces/{cluster.namespace('lab')}/jobs/l-waits",
            body=json.dumps({"spec": {"suspend": False}}),
            content_type="application/merge-patch+json",
        )
    assert reply.status in (403, 422), reply.text
    assert "only Kueue starts it" in reply.body["message"], reply.body["message"]
    assert _held(cluster, "lab", "l-waits")


def test_applying_again_changes_no_kueue_object(run: Run) -> None:
    cluster = run.cluster
    again = apply_set(cluster.admin, cluster.manifests, PLAN_SET, prune=False)
    changed = [c for c in again if c.action is not ObjectAction.UNCHANGED]
    assert not changed, changed
    kinds = {object_key(kind_of(m), m)[1] for m in cluster.manifests}
    assert {"ClusterQueue", "Cohort", "ResourceFlavor"} <= kinds
