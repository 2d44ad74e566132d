"""What a real API server answers where the polite test double used to hide it, and what gpuplex
makes of each answer. The first tests pin the fake to the real answers (recorded from
kube-apiserver v1.36, see tests/kube_real for the same cases against the real thing); the rest
are gpuplex's behaviour on them, fast, for machines without the real control plane:

1. a group the server does not serve: plain-text 404 -> skipped with the install hint;
2. a namespace being deleted: 403 NamespaceTerminating -> "retry later", exit 5, and like a
   namespace that does not exist, refused in apply's dry-run check before anything is changed,
   and shown as `refused` by diff;
3. a Job's pod template changed: 422 on spec.template -> diff says re-create, one-line error;
4. the reconciler's role: every request apply, diff and prune make is one it allows;
5. GPU fields, quota and ConfigMap keys another field manager added: shown by diff, removed by
   apply;
6. a second apply: every object unchanged, from the server's resourceVersion.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.error_codes import ErrorCode
from gpuplex.errors import KubeApiError, KubeForbidden, KubeRetryLater
from gpuplex.kube.api import JSON_PATCH
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction, first_stop
from gpuplex.kube.naming import PLAN_SET, SELF_SET, Manifest, metadata
from gpuplex.kube.render import render_plan, render_self
from gpuplex.kube.self_manifests import SelfOptions, reconciler_rules
from gpuplex.kube.sync import apply_set, diff_set
from gpuplex.specfile import load_spec_file
from tests.integration.kube import objects
from tests.integration.kube.conftest import write_kubeconfig
from tests.integration.kube.fake_api import TOKEN, FakeKubeApi

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "kubernetes-cluster.yaml"
NS = objects.NS


def job(env: str = "1") -> Manifest:
    container = {"name": "train", "image": "trainer:1", "env": [{"name": "EPOCHS", "value": env}]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata("finetune", namespace=NS, tenant="acme", workload="finetune"),
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "finetune"}},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            }
        },
    }


# --- the fake answers as the real API server does ---------------------------------------------


def test_a_group_the_server_does_not_serve_is_a_plain_text_404(tmp_path: Path) -> None:
    with FakeKubeApi(crds=False) as api, connect(_config(api, tmp_path)) as client:
        reply = client.send("GET", "/apis/monitoring.coreos.com/v1/servicemonitors")
        served = client.send("GET", "/api/v1/nodes/missing")
    assert (reply.status, reply.body, reply.text) == (404, {}, "404 page not found\n")
    assert served.status == 404
    assert served.body["details"] == {"name": "missing", "kind": "nodes"}


def test_rbac_refuses_a_group_the_server_does_not_serve_too(tmp_path: Path) -> None:
    with FakeKubeApi(crds=False, rules=[]) as api, connect(_config(api, tmp_path)) as client:
        reply = client.send("GET", "/apis/monitoring.coreos.com/v1/servicemonitors")
    assert reply.status == 403
    assert (
        'cannot list resource "servicemonitors" in API group "monitoring.coreos.com"'
        in (reply.body["message"])
    )


def test_a_namespace_being_deleted_refuses_new_objects_with_namespace_terminating(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace()], PLAN_SET)
    apply_set(transport, [], PLAN_SET)  # prunes it: Terminating until the controller is done
    path = f"/api/v1/namespaces/{NS}/configmaps/new"
    body = json.dumps(objects.config_map("new", {}))
    query = [("fieldManager", "x")]
    reply = transport.send(
        "PATCH", path, query=query, body=body, content_type="application/apply-patch+yaml"
    )
    assert reply.status == 403
    assert reply.body["details"]["causes"][0]["reason"] == "NamespaceTerminating"
    api.finish_deletions()
    assert api.get("v1", "Namespace", NS) is None


def test_changing_a_jobs_template_is_a_422_on_spec_template_with_a_huge_message(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace(), job()], PLAN_SET)
    path = f"/apis/batch/v1/namespaces/{NS}/jobs/finetune"
    reply = transport.send(
        "PATCH",
        path,
        query=[("fieldManager", "gpuplex"), ("force", "true")],
        body=json.dumps(job("2")),
        content_type="application/apply-patch+yaml",
    )
    assert reply.status == 422
    assert reply.body["details"]["causes"][0]["field"] == "spec.template"
    assert len(reply.body["message"]) > 2000


def test_fields_another_manager_set_survive_a_forced_apply_and_show_in_managed_fields(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace(), objects.deployment()], PLAN_SET)
    _patch_gpu(api)
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/chat"
    body = json.dumps(objects.deployment())
    query = [("fieldManager", "gpuplex"), ("force", "true")]
    reply = transport.send(
        "PATCH", path, query=query, body=body, content_type="application/apply-patch+yaml"
    )
    container = reply.body["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-7g.80gb"] == "1"
    managers = [(m["manager"], m["operation"]) for m in reply.body["metadata"]["managedFields"]]
    assert managers == [("gpuplex", "Apply"), ("kubectl-patch", "Update")]


def test_a_json_patch_sent_as_a_quoted_string_is_refused(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace()], PLAN_SET)
    remove = json.dumps([{"op": "remove", "path": "/metadata/labels/x"}])
    twice = _raw(api, "PATCH", f"/api/v1/namespaces/{NS}", json.dumps(remove), JSON_PATCH)
    assert twice == 400  # what the official client sends given a string: JSON of the JSON
    assert _raw(api, "PATCH", f"/api/v1/namespaces/{NS}", remove, JSON_PATCH) == 422  # no label x


# --- 1. an unserved group ---------------------------------------------------------------------


def test_without_the_prometheus_operator_self_apply_diff_and_dry_run_skip_with_the_hint(
    tmp_path: Path,
) -> None:
    spec = load_spec_file(EXAMPLE)
    self_set = render_self(spec, SelfOptions()).manifests
    with FakeKubeApi(crds=False) as api, connect(_config(api, tmp_path)) as client:
        _cluster(api)  # the GPU operator's namespace: its dcgm-exporter Service goes there
        for changes in (
            apply_set(client, self_set, SELF_SET, dry_run=True),
            apply_set(client, self_set, SELF_SET),
            diff_set(client, self_set, SELF_SET),
        ):
            skipped = [c for c in changes if c.action is ObjectAction.SKIP]
            assert {c.object_id.split("/")[0] for c in skipped} == {"ServiceMonitor"}
            assert all("Prometheus operator" in c.note for c in skipped)


# --- 2. a namespace being deleted ---------------------------------------------------------------


def test_re_adding_a_tenant_whose_namespace_is_terminating_says_retry_later(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    tenant = [objects.namespace(), objects.config_map("gpuplex-settings", {})]
    apply_set(transport, tenant, PLAN_SET)
    apply_set(transport, [], PLAN_SET)

    with pytest.raises(KubeRetryLater) as caught:
        apply_set(transport, [*tenant, objects.config_map("new", {})], PLAN_SET)

    assert caught.value.exit_code == 5
    assert f"namespace {NS} is still being deleted" in caught.value.message
    assert "forbidden" not in caught.value.message
    api.finish_deletions()
    assert {c.action for c in apply_set(transport, tenant, PLAN_SET)} == {ObjectAction.CREATE}


def _terminating_tenant(api: FakeKubeApi, transport: ClientTransport) -> list[Manifest]:
    """The tenant applied, then pruned: its namespace is Terminating."""
    tenant = [objects.namespace(), objects.config_map("gpuplex-settings", {})]
    apply_set(transport, tenant, PLAN_SET)
    apply_set(transport, [], PLAN_SET)
    return tenant


def _refused_set(tenant: list[Manifest]) -> list[Manifest]:
    """A priority class and a new tenant (applied first), the tenant whose namespace is
    terminating, and an object in a namespace that neither exists nor is in the set (the GPU
    operator's)."""
    return [
        objects.priority_class(),
        objects.namespace("gpuplex-new"),
        objects.config_map("in-new", {}, namespace="gpuplex-new"),
        *tenant,
        objects.config_map("gpuplex-mig-parted-config", {}, namespace="gpu-operator"),
    ]


def test_diff_says_what_the_server_refuses_and_the_code_apply_would_stop_with(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    wanted = _refused_set(_terminating_tenant(api, transport))
    before = copy.deepcopy(api.objects)

    changes = {c.object_id: c for c in diff_set(transport, wanted, PLAN_SET)}

    assert api.objects == before
    assert {i: c.action for i, c in changes.items()} == {
        "PriorityClass/gpuplex-priority-100": ObjectAction.CREATE,
        "Namespace/gpuplex-new": ObjectAction.CREATE,
        "Namespace/gpuplex-acme": ObjectAction.UNCHANGED,
        "ConfigMap/gpuplex-new/in-new": ObjectAction.CREATE,
        "ConfigMap/gpuplex-acme/gpuplex-settings": ObjectAction.REFUSED,
        "ConfigMap/gpu-operator/gpuplex-mig-parted-config": ObjectAction.REFUSED,
    }
    assert "could not check" in changes["ConfigMap/gpuplex-new/in-new"].note
    terminating = changes["ConfigMap/gpuplex-acme/gpuplex-settings"]
    assert terminating.code is ErrorCode.KUBE_RETRY_LATER
    assert f"namespace {NS} is still being deleted" in terminating.note
    missing = changes["ConfigMap/gpu-operator/gpuplex-mig-parted-config"]
    assert missing.code is ErrorCode.KUBE_API
    assert "create namespace gpu-operator first" in missing.note
    assert first_stop(changes.values()) == terminating  # the first apply would stop at


@pytest.mark.parametrize("refusal", ["terminating", "missing"])
def test_apply_changes_nothing_when_the_servers_dry_run_refuses_one_object(
    api: FakeKubeApi, transport: ClientTransport, refusal: str
) -> None:
    wanted = _refused_set(_terminating_tenant(api, transport))
    if refusal == "missing":
        api.finish_deletions()  # the tenant's namespace is gone: it is created anew
    before = copy.deepcopy(api.objects)
    api.requests.clear()

    with pytest.raises(KubeApiError) as caught:
        apply_set(transport, wanted, PLAN_SET)

    assert api.objects == before
    assert api.writes()
    assert all(r.query.get("dryRun") == ["All"] for r in api.writes())
    if refusal == "terminating":
        assert caught.value.exit_code == 5
        assert f"namespace {NS} is still being deleted" in caught.value.message
    else:
        assert caught.value.exit_code == 1
        assert "create namespace gpu-operator first" in caught.value.message


# --- 3. a Job's template ------------------------------------------------------------------------


def test_a_changed_job_template_is_a_recreate_in_diff_and_one_line_in_apply(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace(), job()], PLAN_SET)

    [change] = [
        c
        for c in diff_set(transport, [objects.namespace(), job("2")], PLAN_SET)
        if c.action is not ObjectAction.UNCHANGED
    ]
    assert change.action is ObjectAction.RECREATE
    assert change.fields == ("spec.template.spec.containers[0].env[0].value",)
    assert "needs delete and re-create" in change.note
    with pytest.raises(KubeApiError) as caught:
        apply_set(transport, [objects.namespace(), job("2")], PLAN_SET)
    message = caught.value.message
    assert caught.value.exit_code == 1
    assert "spec.template cannot change in place" in message
    assert "delete Job finetune and apply again" in message
    assert len(message) < 400
    assert "\n" not in message


# --- 4. the reconciler's role -------------------------------------------------------------------


def _cluster(api: FakeKubeApi) -> list[Manifest]:
    """The example's nodes and the GPU operator's namespace; the example's plan set."""
    objects.example_cluster(api.put, EXAMPLE)
    spec = load_spec_file(EXAMPLE)
    return render_plan(spec, make_plan(spec)).manifests


def test_the_reconcilers_role_allows_every_request_apply_diff_and_prune_make(
    tmp_path: Path,
) -> None:
    with (
        FakeKubeApi(rules=reconciler_rules(), crds=False) as api,
        connect(_config(api, tmp_path)) as client,
    ):
        plan_set = _cluster(api)
        fewer = [m for m in plan_set if m["kind"] not in ("Job", "Service")]
        apply_set(client, plan_set, PLAN_SET, dry_run=True)
        apply_set(client, plan_set, PLAN_SET)  # creates
        _patch_gpu(api, *_first_deployment(plan_set))
        diff_set(client, plan_set, PLAN_SET)
        apply_set(client, fewer, PLAN_SET)  # removes the foreign field, prunes
        diff_set(client, plan_set, PLAN_SET)
    # none was refused (a 403 raises KubeForbidden), and every kind of request was made
    assert {r.method for r in api.requests} == {"GET", "PATCH", "DELETE"}
    assert any(r.query.get("labelSelector") for r in api.requests)  # prune's lists
    assert any(r.content_type == JSON_PATCH for r in api.requests)  # the foreign field's removal


@pytest.mark.parametrize(("resource", "verb"), [("configmaps", "list"), ("deployments", "create")])
def test_a_role_without_one_verb_is_refused_by_the_fake_as_by_rbac(
    tmp_path: Path, resource: str, verb: str
) -> None:
    rules = copy.deepcopy(reconciler_rules())
    for rule in rules:
        if resource in rule["resources"]:
            rule["resources"].remove(resource)
            others = [v for v in rule["verbs"] if v != verb]
            rules.append({**rule, "resources": [resource], "verbs": others})
            break
    with FakeKubeApi(rules=rules, crds=False) as api, connect(_config(api, tmp_path)) as client:
        plan_set = _cluster(api)
        with pytest.raises(KubeForbidden) as caught:
            apply_set(client, plan_set, PLAN_SET)
    assert caught.value.exit_code == 4


# --- 5. GPU fields from another manager -------------------------------------------------------


def _first_deployment(plan_set: list[Manifest]) -> tuple[str, str, str]:
    found = next(m for m in plan_set if m["kind"] == "Deployment")
    container = found["spec"]["template"]["spec"]["containers"][0]["name"]
    return found["metadata"]["name"], found["metadata"]["namespace"], container


def _patch_gpu(
    api: FakeKubeApi, name: str = "chat", namespace: str = NS, container: str = "model"
) -> None:
    """What `kubectl patch` does to a gpuplex Deployment (field manager kubectl-patch)."""
    deployment = api.get("apps/v1", "Deployment", name, namespace)
    containers = copy.deepcopy(deployment["spec"]["template"]["spec"]["containers"])
    for item in containers:
        if item["name"] == container:
            limits = item.setdefault("resources", {}).setdefault("limits", {})
            limits["nvidia.com/mig-7g.80gb"] = "1"
    patch: dict[str, Any] = {
        "spec": {
            "template": {
                "spec": {
                    "containers": containers,
                    "nodeSelector": {"example.com/rack": "a1"},
                    "tolerations": [{"key": "example.com/gpu", "operator": "Exists"}],
                }
            }
        }
    }
    api.patch_as("kubectl-patch", "apps/v1", "Deployment", name, namespace, patch)


def test_gpu_fields_another_manager_added_show_in_diff_and_apply_removes_them(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    wanted = [objects.namespace(), objects.deployment()]
    apply_set(transport, wanted, PLAN_SET)
    _patch_gpu(api)

    [change] = [c for c in diff_set(transport, wanted, PLAN_SET) if c.action is ObjectAction.CHANGE]

    prefix = "spec.template.spec"
    assert change.fields == (
        f'{prefix}.containers[model].resources.limits["nvidia.com/mig-7g.80gb"] (set by kubectl-patch)',
        f'{prefix}.nodeSelector["example.com/rack"] (set by kubectl-patch)',
        f"{prefix}.tolerations (set by kubectl-patch)",
    )
    assert change.note == "removes fields set by kubectl-patch"

    removals = [r for r in api.requests if r.content_type == JSON_PATCH]
    assert [r.query.get("dryRun") for r in removals] == [["All"]]  # diff checks the removal too
    api.requests.clear()

    applied = {c.object_id: c for c in apply_set(transport, wanted, PLAN_SET)}

    assert applied["Deployment/gpuplex-acme/chat"].action is ObjectAction.CHANGE
    [check, removal] = [r for r in api.requests if r.content_type == JSON_PATCH]
    assert check.query == {"fieldManager": ["gpuplex"], "dryRun": ["All"]}  # apply's check
    assert check.body == removal.body
    assert removal.query == {"fieldManager": ["gpuplex"]}
    assert removal.body[0] == {
        "op": "test",
        "path": "/spec/template/spec/containers/0/name",
        "value": "model",
    }
    live = api.get("apps/v1", "Deployment", "chat", NS)
    pod = live["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert "nodeSelector" not in pod or not pod["nodeSelector"]
    assert "tolerations" not in pod
    assert {c.action for c in diff_set(transport, wanted, PLAN_SET)} == {ObjectAction.UNCHANGED}


def _quota() -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": metadata("gpuplex-quota", namespace=NS, tenant="acme"),
        "spec": {"hard": {"requests.nvidia.com/mig-3g.40gb": "2", "pods": "10"}},
    }


def test_keys_another_manager_added_to_a_quota_and_a_config_map_show_in_diff_and_go(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    wanted = [
        objects.namespace(),
        objects.config_map("gpuplex-settings", {"mode": "mig"}),
        _quota(),
    ]
    apply_set(transport, wanted, PLAN_SET)
    more = {"spec": {"hard": {"count/secrets": "5", "pods": "20"}}}  # pods: gpuplex's, taken back
    api.patch_as("kubectl-patch", "v1", "ResourceQuota", "gpuplex-quota", NS, more)
    api.patch_as("kubectl-edit", "v1", "ConfigMap", "gpuplex-settings", NS, {"data": {"x": "1"}})

    changed = {
        c.object_id: c
        for c in diff_set(transport, wanted, PLAN_SET)
        if c.action is ObjectAction.CHANGE
    }

    assert changed[f"ConfigMap/{NS}/gpuplex-settings"].fields == (
        'data["x"] (set by kubectl-edit)',
    )
    assert changed[f"ResourceQuota/{NS}/gpuplex-quota"].fields == (
        "spec.hard.pods",
        'spec.hard["count/secrets"] (set by kubectl-patch)',
    )

    applied = {c.object_id: c.action for c in apply_set(transport, wanted, PLAN_SET)}

    assert applied[f"ResourceQuota/{NS}/gpuplex-quota"] is ObjectAction.CHANGE
    live_quota = api.get("v1", "ResourceQuota", "gpuplex-quota", NS)
    assert live_quota["spec"]["hard"] == _quota()["spec"]["hard"]
    assert api.get("v1", "ConfigMap", "gpuplex-settings", NS)["data"] == {"mode": "mig"}
    assert {c.action for c in diff_set(transport, wanted, PLAN_SET)} == {ObjectAction.UNCHANGED}


def test_a_dry_run_apply_removes_nothing(api: FakeKubeApi, transport: ClientTransport) -> None:
    wanted = [objects.namespace(), objects.deployment()]
    apply_set(transport, wanted, PLAN_SET)
    _patch_gpu(api)
    before = copy.deepcopy(api.objects)
    changes = apply_set(transport, wanted, PLAN_SET, dry_run=True)
    assert api.objects == before
    assert [c.action for c in changes] == [ObjectAction.UNCHANGED, ObjectAction.CHANGE]


# --- 6. a second apply ------------------------------------------------------------------------


def test_an_apply_reports_changed_with_the_fields_and_unchanged_from_the_server(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace(), objects.deployment()], PLAN_SET)
    changes = apply_set(transport, [objects.namespace(), objects.deployment(replicas=3)], PLAN_SET)
    assert [(c.action, c.fields) for c in changes] == [
        (ObjectAction.UNCHANGED, ()),
        (ObjectAction.CHANGE, ("spec.replicas",)),
    ]


def _config(api: FakeKubeApi, directory: Path) -> Path:
    return write_kubeconfig(directory / "kubeconfig", api.url)


def _raw(api: FakeKubeApi, method: str, path: str, body: str, content_type: str) -> int:
    """The status of one request sent byte for byte, past any client's serialisation."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(  # noqa: S310 - the fake on loopback
        api.url + path,
        data=body.encode(),
        method=method,
        headers={"Content-Type": content_type, "Authorization": f"Bearer {TOKEN}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return error.code
