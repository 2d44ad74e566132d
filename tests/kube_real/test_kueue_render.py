"""The Kueue objects `gpuplex kube render` makes from `queues:`, against the real API server with
Kueue's CRDs installed (from `../shared/data/kueue-crds`; no Kueue controller runs here): the API
server accepts every one of them through `kube apply`'s own code (schemas, CEL rules and all), and
the policy that sends tenant Jobs through Kueue refuses a Job without the queue-name label and
admits one with it.

The control plane is shared with the other kube_real tests: this module's tenants live under their
own namespace prefix, it does not prune, and it removes its Job policy when done (the policy binds
to every tenant namespace, other tests' too).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction, ObjectChange
from gpuplex.kube.job_queue_policy import POLICY_NAME
from gpuplex.kube.kueue import LOCAL_QUEUE, QUEUE_NAME_LABEL
from gpuplex.kube.naming import PLAN_SET, QUEUED_PRIORITY_CLASS, Manifest, namespace_for
from gpuplex.kube.render import render_plan
from gpuplex.kube.sync import apply_set
from tests.kube_real.cluster import ControlPlane, send_json as send, wait_until
from tests.unit.kube.kueue_crds import crd_documents, require_crds
from tests.unit.kube.test_kueue import SPEC

PREFIX = "kueue-render-"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WAIT_S = 60.0


def install_kueue_crds(admin: ClientTransport) -> None:
    """Server-side apply of every Kueue CRD (another test may have installed them already), then
    wait until each is established."""
    for crd in crd_documents():
        name = crd["metadata"]["name"]
        reply = send(
            admin,
            "PATCH",
            f"{CRD_PATH}/{name}",
            crd,
            content_type="application/apply-patch+yaml",
            fieldManager="gpuplex-tests",
            force="true",
        )
        assert reply.status in (200, 201), reply.text
    for crd in crd_documents():
        name = crd["metadata"]["name"]
        wait_until(f"CRD {name} established", functools.partial(_established, admin, name))


def _established(admin: ClientTransport, name: str) -> bool:
    conditions = send(admin, "GET", f"{CRD_PATH}/{name}").body.get("status", {}).get("conditions")
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions or [])


def job(name: str, labels: dict[str, str]) -> Manifest:
    """A suspended Job (no Kueue runs here to let it go), created as a dry run; a queued one's
    pods at the queued priority class, as the Job policy wants."""
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
    }
    if QUEUE_NAME_LABEL in labels:
        pod["priorityClassName"] = QUEUED_PRIORITY_CLASS
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"suspend": True, "template": {"spec": pod}},
    }


@dataclass
class Applied:
    admin: ClientTransport
    spec: GpuplexSpec
    #: the tenant namespaces, the Job policy and the Kueue objects
    manifests: list[Manifest]
    changes: list[ObjectChange]


@pytest.fixture(scope="module")
def applied(kube_cluster: ControlPlane) -> Iterator[Applied]:
    require_crds()
    spec_dict = {**SPEC, "kubernetes": {"namespace_prefix": PREFIX, "kueue": {}}}
    spec = GpuplexSpec.model_validate(spec_dict)
    manifests = render_plan(spec, make_plan(spec)).manifests
    kueue_and_policy = [
        m
        for m in manifests
        if m["apiVersion"].startswith("kueue.x-k8s.io/")
        or m["metadata"]["name"] == POLICY_NAME
        or m["kind"] == "Namespace"
    ]
    with connect(kube_cluster.kubeconfig) as admin:
        install_kueue_crds(admin)
        changes = apply_set(admin, kueue_and_policy, PLAN_SET, prune=False)
        try:
            yield Applied(admin, spec, kueue_and_policy, changes)
        finally:
            for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
                path = f"/apis/admissionregistration.k8s.io/v1/{kind}/{POLICY_NAME}"
                send(admin, "DELETE", path)


def test_the_api_server_accepts_every_rendered_kueue_object(
    applied: Applied,
) -> None:
    admin, spec = applied.admin, applied.spec
    changes = applied.changes
    assert {c.action for c in changes} == {ObjectAction.CREATE}, changes
    assert len(changes) == len(applied.manifests)
    kinds = {c.object_id.split("/")[0] for c in changes}
    assert {"ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"} <= kinds
    assert "WorkloadPriorityClass" in kinds
    # stored as rendered: the API server kept the quotas (nothing pruned as unknown)
    cq = send(admin, "GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/gpuplex-contoso").body
    assert cq["spec"]["cohortName"] == "gpuplex-research"
    assert cq["spec"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": f"{PREFIX}contoso"
    }
    flavors = {f["name"]: f for g in cq["spec"]["resourceGroups"] for f in g["flavors"]}
    h100 = flavors["gpuplex-gpu-h100-80gb"]["resources"][0]
    assert (h100["nominalQuota"], h100["borrowingLimit"]) == ("2", "1")
    namespace = namespace_for(spec, "fabrikam")
    local = send(admin, "GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{namespace}/localqueues")
    assert [q["spec"]["clusterQueue"] for q in local.body["items"]] == ["gpuplex-fabrikam"]


def test_a_second_apply_changes_nothing(applied: Applied) -> None:
    """The server stores the objects as rendered, quantities in Kueue's canonical form, also where
    this session's Kueue controller runs its defaulting webhook (which stores every quantity as a
    string: rendered as numbers, each new ClusterQueue showed one change on the next apply)."""
    again = apply_set(applied.admin, applied.manifests, PLAN_SET, prune=False)
    assert {c.action for c in again} == {ObjectAction.UNCHANGED}, [
        c for c in again if c.action is not ObjectAction.UNCHANGED
    ]


def test_the_api_server_refuses_a_broken_cluster_queue(
    applied: Applied,
) -> None:
    """The CRD's own rules run: a ClusterQueue outside any cohort may not set a borrowing limit."""
    admin = applied.admin
    broken = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "gpuplex-test-broken"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "gpuplex-gpu-h100-80gb",
                            "resources": [
                                {"name": "nvidia.com/gpu", "nominalQuota": 1, "borrowingLimit": 1}
                            ],
                        }
                    ],
                }
            ]
        },
    }
    reply = send(admin, "POST", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues", broken, dryRun="All")
    assert reply.status == 422, reply.text


def test_a_tenant_job_must_name_its_queue(
    applied: Applied,
) -> None:
    admin, spec = applied.admin, applied.spec
    namespace = namespace_for(spec, "contoso")
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs"

    def refused() -> Reply | None:
        reply = send(admin, "POST", path, job("unqueued", {}), dryRun="All")
        return reply if reply.status != 201 else None  # the policy takes a moment to load

    reply = wait_until("the Job policy to refuse an unqueued Job", refused)
    assert reply.status in (403, 422), reply.text
    assert f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE}" in reply.text
    queued = send(admin, "POST", path, job("queued", {QUEUE_NAME_LABEL: LOCAL_QUEUE}), dryRun="All")
    assert queued.status == 201, queued.text
    # the plan's own batch workload is exempt
    planned = send(admin, "POST", path, job("train", {}), dryRun="All")
    assert planned.status == 201, planned.text
    # outside the tenant namespaces the policy does not apply
    outside = send(
        admin, "POST", "/apis/batch/v1/namespaces/default/jobs", job("free", {}), dryRun="All"
    )
    assert outside.status == 201, outside.text
