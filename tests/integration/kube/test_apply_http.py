"""Server-side apply, prune and diff through the official Kubernetes client against a fake API
server over real HTTP: the exact requests (method, path, query, content type, body, token) and
what gpuplex makes of the API's answers, including its refusals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gpuplex.errors import KubeApiError, KubeForbidden, KubeRenderError, KubeUnreachable
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction, ObjectChange
from gpuplex.kube.naming import PLAN_SET, SELF_SET, metadata
from gpuplex.kube.sync import NODE_MISSING, apply_set, diff_set
from tests.integration.kube import objects
from tests.integration.kube.conftest import write_kubeconfig
from tests.integration.kube.fake_api import APPLY_PATCH, TOKEN, FakeKubeApi, Recorded, status

SELECTOR = "app.kubernetes.io/managed-by=gpuplex,gpuplex.dev/set=plan"
NS_PATH = "/api/v1/namespaces/gpuplex-acme"
PATCHES = [
    "/api/v1/namespaces/gpuplex-acme",
    "/apis/scheduling.k8s.io/v1/priorityclasses/gpuplex-priority-100",
    "/api/v1/nodes/gpu-a",
    "/api/v1/namespaces/gpuplex-acme/configmaps/gpuplex-settings",
    "/apis/apps/v1/namespaces/gpuplex-acme/deployments/chat",
]


def actions(changes: list[ObjectChange]) -> dict[str, ObjectAction]:
    return {change.object_id: change.action for change in changes}


def patches(api: FakeKubeApi) -> list[Recorded]:
    return [r for r in api.requests if r.method == "PATCH"]


def test_server_side_apply_sends_each_object_in_order_as_field_manager_gpuplex(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.live_node())
    seen: list[ObjectChange] = []

    checked: list[ObjectChange] = []

    changes = apply_set(
        transport, objects.plan_set(), PLAN_SET, on_change=seen.append, on_check=checked.append
    )

    # first the whole apply as the server's dry run, then the same requests for real
    checks, applies = patches(api)[: len(PATCHES)], patches(api)[len(PATCHES) :]
    assert [r.path for r in checks] == PATCHES
    assert all(r.query.get("dryRun") == ["All"] for r in checks)
    assert [r.path for r in applies] == PATCHES
    assert [c.object_id for c in checked] == [c.object_id for c in changes]
    for request, manifest in zip(
        applies, sorted(objects.plan_set(), key=lambda m: PATCHES.index(_path(m))), strict=True
    ):
        assert request.query == {"fieldManager": ["gpuplex"], "force": ["true"]}
        assert request.content_type == APPLY_PATCH
        assert request.authorization == f"Bearer {TOKEN}"
        assert request.body == manifest  # the whole object, sent as written
    assert seen == changes
    assert actions(changes) == {
        "Namespace/gpuplex-acme": ObjectAction.CREATE,
        "PriorityClass/gpuplex-priority-100": ObjectAction.CREATE,
        "Node/gpu-a": ObjectAction.CHANGE,  # the node exists: only labelled and tainted
        "ConfigMap/gpuplex-acme/gpuplex-settings": ObjectAction.CREATE,
        "Deployment/gpuplex-acme/chat": ObjectAction.CREATE,
    }
    live_node = api.get("v1", "Node", "gpu-a")
    assert live_node["metadata"]["labels"]["pool.gpuplex.dev/serve"] == "true"
    assert live_node["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-a"
    assert live_node["spec"]["podCIDR"] == "10.244.1.0/24"
    deployment = api.get("apps/v1", "Deployment", "chat", "gpuplex-acme")
    assert deployment["spec"]["replicas"] == 2
    assert [(m["manager"], m["operation"]) for m in deployment["metadata"]["managedFields"]] == [
        ("gpuplex", "Apply")
    ]


def test_a_second_apply_reports_every_object_unchanged_and_prunes_nothing(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.live_node())
    apply_set(transport, objects.plan_set(), PLAN_SET)
    before = {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()}
    api.requests.clear()

    changes = apply_set(transport, objects.plan_set(), PLAN_SET)

    assert set(actions(changes).values()) == {ObjectAction.UNCHANGED}
    assert not [r for r in api.requests if r.method == "DELETE"]
    after = {key: obj["metadata"]["resourceVersion"] for key, obj in api.objects.items()}
    assert after == before  # nothing changed, so the server wrote nothing


def test_prune_lists_every_kind_by_the_sets_labels_and_deletes_only_what_is_no_longer_rendered(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.live_node())
    apply_set(transport, objects.plan_set(), PLAN_SET)
    api.put(objects.config_map("gpuplex-old", {"a": "1"}))  # gpuplex's, no longer rendered
    self_cm = objects.config_map("gpuplex-self", {"a": "1"})
    self_cm["metadata"]["labels"]["gpuplex.dev/set"] = SELF_SET
    api.put(self_cm)  # the other set's
    api.put({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-root-ca.crt", "namespace": "gpuplex-acme"}, "data": {}})  # fmt: skip
    api.put(objects.node("gpu-b"))  # a Node with gpuplex's labels: never pruned
    api.requests.clear()

    changes = apply_set(transport, objects.plan_set()[:-1], PLAN_SET)  # the Deployment is gone

    lists = [r for r in api.requests if r.method == "GET" and r.query.get("labelSelector")]
    assert all(r.query == {"labelSelector": [SELECTOR]} for r in lists)
    listed = [r.path for r in lists]
    assert "/api/v1/configmaps" in listed  # across all namespaces
    assert "/apis/apps/v1/deployments" in listed
    assert "/api/v1/namespaces" in listed
    assert "/api/v1/nodes" not in listed
    assert listed.index("/api/v1/configmaps") < listed.index("/api/v1/namespaces")
    deletes = [r for r in api.requests if r.method == "DELETE"]
    pruned_paths = [
        "/api/v1/namespaces/gpuplex-acme/configmaps/gpuplex-old",
        "/apis/apps/v1/namespaces/gpuplex-acme/deployments/chat",
    ]
    assert [r.path for r in deletes] == pruned_paths * 2  # the check's dry run, then for real
    dry, real = deletes[:2], deletes[2:]
    assert all(r.query == {"propagationPolicy": ["Background"], "dryRun": ["All"]} for r in dry)
    assert all(r.query == {"propagationPolicy": ["Background"]} for r in real)
    pruned = {c.object_id for c in changes if c.action is ObjectAction.PRUNE}
    assert pruned == {
        "ConfigMap/gpuplex-acme/gpuplex-old",
        "Deployment/gpuplex-acme/chat",
    }
    assert api.get("v1", "ConfigMap", "gpuplex-self", "gpuplex-acme") is not None
    assert api.get("v1", "ConfigMap", "kube-root-ca.crt", "gpuplex-acme") is not None
    assert api.get("v1", "Node", "gpu-b") is not None


def test_no_prune_deletes_nothing_and_lists_nothing(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.config_map("gpuplex-old", {"a": "1"}))
    changes = apply_set(transport, [objects.namespace()], PLAN_SET, prune=False)
    assert actions(changes) == {"Namespace/gpuplex-acme": ObjectAction.CREATE}
    # read, dry-run applied (the check), then read and applied
    assert [r.method for r in api.requests] == ["GET", "PATCH", "GET", "PATCH"]
    assert api.requests[1].query.get("dryRun") == ["All"]
    assert "dryRun" not in api.requests[3].query


def test_server_dry_run_sends_dry_run_all_everywhere_and_changes_nothing(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.live_node())
    api.put(objects.config_map("gpuplex-old", {"a": "1"}, namespace="default"))
    before = copy.deepcopy(api.objects)

    changes = apply_set(transport, objects.plan_set(), PLAN_SET, dry_run=True)

    writes = api.writes()
    assert writes
    assert all(r.query.get("dryRun") == ["All"] for r in writes)
    assert api.objects == before
    by_id = {change.object_id: change for change in changes}
    # the namespace is not really created, so the server refuses what goes in it: not an error
    assert by_id["ConfigMap/gpuplex-acme/gpuplex-settings"].action is ObjectAction.CREATE
    assert "dry run could not check" in by_id["ConfigMap/gpuplex-acme/gpuplex-settings"].note
    assert by_id["ConfigMap/default/gpuplex-old"].action is ObjectAction.PRUNE


def test_a_node_not_in_the_cluster_is_skipped_never_created(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    changes = apply_set(transport, [objects.node("gpu-missing")], PLAN_SET, prune=False)

    assert changes == [ObjectChange("Node/gpu-missing", ObjectAction.SKIP, note=NODE_MISSING)]
    assert [(r.method, r.path) for r in api.requests] == [("GET", "/api/v1/nodes/gpu-missing")] * 2


def test_custom_resources_without_their_definition_are_skipped(
    tmp_path: Path,
) -> None:
    self_set = [objects.namespace(set_name=SELF_SET), objects.service_monitor()]
    with FakeKubeApi(crds=False) as api, connect(write_kubeconfig(tmp_path / "kc", api.url)) as t:
        changes = apply_set(t, self_set, SELF_SET)
        assert diff_set(t, self_set, SELF_SET)[1] == changes[1]
    by_id = {change.object_id: change for change in changes}
    assert by_id["Namespace/gpuplex-acme"].action is ObjectAction.CREATE
    skipped = by_id["ServiceMonitor/gpuplex-acme/gpuplex-server"]
    assert skipped.action is ObjectAction.SKIP
    assert "does not serve monitoring.coreos.com/v1 servicemonitors" in skipped.note
    assert "Prometheus operator" in skipped.note


def test_a_builtin_kind_the_cluster_does_not_serve_is_an_error_not_a_skip(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    del api.resources[("admissionregistration.k8s.io/v1", "validatingadmissionpolicies")]
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": metadata("gpuplex-tenant-gpu-resources"),
        "spec": {"validations": [{"expression": "true"}]},
    }
    with pytest.raises(KubeApiError) as caught:
        apply_set(transport, [policy], PLAN_SET)
    assert "does not serve admissionregistration.k8s.io/v1 validatingadmissionpolicies" in (
        caught.value.message
    )
    assert "gpuplex needs Kubernetes 1.30 or newer" in caught.value.message


def test_forbidden_names_the_verb_resource_namespace_and_the_apis_message(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.namespace())
    message = (
        'deployments.apps "chat" is forbidden: User "system:serviceaccount:ci:deployer" cannot '
        'patch resource "deployments" in API group "apps" in the namespace "gpuplex-acme"'
    )
    details = {"name": "chat", "group": "apps", "kind": "deployments"}
    path = "/apis/apps/v1/namespaces/gpuplex-acme/deployments/chat"
    api.fail("PATCH", path, status(403, "Forbidden", message, details))

    with pytest.raises(KubeForbidden) as caught:
        apply_set(transport, [objects.namespace(), objects.deployment()], PLAN_SET)

    text = caught.value.message
    assert "forbidden to patch deployments.apps 'chat' in namespace gpuplex-acme" in text
    assert message in text
    assert caught.value.exit_code == 4
    assert not [r for r in api.requests if r.method == "DELETE"]  # no prune after a failure


@pytest.mark.parametrize(
    ("code", "reason", "message", "hint"),
    [
        (
            422,
            "Invalid",
            'ConfigMap "gpuplex-settings" is invalid: data: Too many: 2: must have at most 1 items',
            "",
        ),
        (
            409,
            "Conflict",
            'Operation cannot be fulfilled on configmaps "gpuplex-settings": the object has been '
            "modified; please apply your changes to the latest version and try again",
            "",
        ),
        (500, "InternalError", "Internal error occurred: etcdserver: request timed out", "again"),
        (  # refused by admission, not by RBAC: no role would help
            403,
            "Forbidden",
            'configmaps "gpuplex-settings" is forbidden: exceeded quota: limits, requested: '
            "count/configmaps=1, used: count/configmaps=4, limited: count/configmaps=4",
            "",
        ),
    ],
)
def test_other_refusals_name_the_object_status_and_message(
    api: FakeKubeApi,
    transport: ClientTransport,
    code: int,
    reason: str,
    message: str,
    hint: str,
) -> None:
    api.put(objects.namespace())
    path = "/api/v1/namespaces/gpuplex-acme/configmaps/gpuplex-settings"
    details = {"name": "gpuplex-settings", "kind": "configmaps"}
    api.fail("PATCH", path, status(code, reason, message, details))

    with pytest.raises(KubeApiError) as caught:
        apply_set(transport, [objects.config_map("gpuplex-settings", {})], PLAN_SET)

    assert type(caught.value) is KubeApiError
    text = caught.value.message
    assert text.startswith(f"patch ConfigMap/gpuplex-acme/gpuplex-settings: HTTP {code} {reason}")
    assert message in text
    assert hint in text


def test_a_missing_namespace_outside_a_dry_run_is_an_error(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    with pytest.raises(KubeApiError, match='namespaces "gpuplex-acme" not found'):
        apply_set(transport, [objects.config_map("gpuplex-settings", {})], PLAN_SET)


def test_a_rejected_token_is_forbidden_with_the_address(tmp_path: Path, api: FakeKubeApi) -> None:
    config = write_kubeconfig(tmp_path / "kc", api.url, token="expired")  # noqa: S106
    with connect(config) as client, pytest.raises(KubeForbidden) as caught:
        apply_set(client, [objects.namespace()], PLAN_SET)
    assert f"the Kubernetes API at {api.url} did not accept the credentials" in caught.value.message
    assert "401 Unauthorized" in caught.value.message
    assert api.requests[0].authorization == "Bearer expired"


def test_an_object_without_the_sets_labels_is_refused_before_any_request(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    stray = objects.config_map("gpuplex-settings", {})
    stray["metadata"]["labels"]["gpuplex.dev/set"] = SELF_SET
    with pytest.raises(KubeRenderError, match=r"gpuplex\.dev/set=plan"):
        apply_set(transport, [objects.namespace(), stray], PLAN_SET)
    with pytest.raises(KubeRenderError, match="rendered twice"):
        apply_set(transport, [objects.namespace(), objects.namespace()], PLAN_SET)
    assert api.requests == []


def test_diff_reads_each_object_dry_runs_its_apply_and_writes_nothing(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    api.put(objects.live_node())
    apply_set(transport, objects.plan_set(), PLAN_SET)
    api.put(objects.config_map("gpuplex-old", {"a": "1"}))
    before = copy.deepcopy(api.objects)
    api.requests.clear()
    desired = objects.plan_set()
    desired[3] = objects.config_map("gpuplex-settings", {"mode": "mps"})
    desired[4] = objects.deployment(replicas=3)
    desired.append(objects.config_map("gpuplex-new", {"b": "2"}))
    desired[1]["metadata"]["labels"]["pool.gpuplex.dev/train"] = "true"

    changes = diff_set(transport, desired, PLAN_SET)

    assert api.objects == before
    assert all(r.query.get("dryRun") == ["All"] for r in api.writes())
    deletes = [r.path for r in api.requests if r.method == "DELETE"]  # the prune, dry-run
    assert deletes == ["/api/v1/namespaces/gpuplex-acme/configmaps/gpuplex-old"]
    by_id = {change.object_id: change for change in changes}
    assert (
        by_id["Namespace/gpuplex-acme"].action is ObjectAction.UNCHANGED
    )  # server defaults ignored
    assert by_id["PriorityClass/gpuplex-priority-100"].action is ObjectAction.UNCHANGED
    assert by_id["ConfigMap/gpuplex-acme/gpuplex-settings"].fields == ("data.mode",)
    assert by_id["Deployment/gpuplex-acme/chat"].fields == ("spec.replicas",)
    assert by_id["Node/gpu-a"].fields == ('metadata.labels["pool.gpuplex.dev/train"]',)
    assert by_id["ConfigMap/gpuplex-acme/gpuplex-new"].action is ObjectAction.CREATE
    assert by_id["ConfigMap/gpuplex-acme/gpuplex-old"].action is ObjectAction.PRUNE
    # a created object is dry-run applied too: what diff promises, the server has checked
    new_path = "/api/v1/namespaces/gpuplex-acme/configmaps/gpuplex-new"
    assert [r.method for r in api.requests if r.path == new_path] == ["GET", "PATCH"]


def test_diff_of_a_missing_node_skips_it(api: FakeKubeApi, transport: ClientTransport) -> None:
    changes = diff_set(transport, [objects.node("gpu-z")], PLAN_SET)
    assert changes == [ObjectChange("Node/gpu-z", ObjectAction.SKIP, note=NODE_MISSING)]


def test_a_closed_port_is_unreachable_with_the_address(tmp_path: Path) -> None:
    import socket

    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        with (
            connect(write_kubeconfig(tmp_path / "kc", url), context="fake") as client,
            pytest.raises(KubeUnreachable) as caught,
        ):
            diff_set(client, [objects.namespace()], PLAN_SET)
    assert f"cannot reach the Kubernetes API at {url}" in caught.value.message
    assert "Connection refused" in caught.value.message
    assert "context fake" in caught.value.message


def _path(manifest: dict[str, object]) -> str:
    index = {
        "Namespace": 0,
        "PriorityClass": 1,
        "Node": 2,
        "ConfigMap": 3,
        "Deployment": 4,
    }
    return PATCHES[index[str(manifest["kind"])]]


def test_applying_a_node_keeps_the_taints_others_set_and_replaces_only_the_pool_taint(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    # spec.taints is an atomic list: a forced apply of gpuplex's taint alone would wipe these
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    gpu_operator = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    old_pool = {"key": "gpuplex.dev/pool", "value": "old", "effect": "NoSchedule"}
    live = objects.live_node()
    live["spec"]["taints"] = [cordon, gpu_operator, old_pool]
    api.put(live)

    apply_set(transport, [objects.node()], PLAN_SET, prune=False)

    check, request = patches(api)
    assert check.body == request.body
    new_pool = {"key": "gpuplex.dev/pool", "value": "serve", "effect": "NoSchedule"}
    assert request.body["spec"]["taints"] == [cordon, gpu_operator, new_pool]
    assert api.get("v1", "Node", "gpu-a")["spec"]["taints"] == [cordon, gpu_operator, new_pool]
