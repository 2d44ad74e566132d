"""Apply all or nothing, as far as the API allows, against the real control plane: where the API
server refuses any object of the set (a namespace still being deleted, a namespace that does not
exist, a quota), `kube diff` says so for that object and exits as `kube apply` would, and `kube
apply` exits without changing one byte of the cluster (every object's resourceVersion, in every
namespace, of every kind the set renders). Keys another field manager added to a gpuplex quota or
ConfigMap show in diff and apply removes them.

The control plane is shared with the other kube_real tests: this module's tenants live under
their own namespace prefix with a GPU operator namespace of their own; it applies only their
namespaced objects that run no pods (no Deployments, no Jobs, nothing cluster-scoped), never
prunes for real, and deletes its namespaces when done. Its spec's cluster-scoped objects are only
ever dry-run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplex.core.plan import make_plan
from gpuplex.kube.api import Reply
from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.diff import ObjectAction, ObjectChange
from gpuplex.kube.naming import PLAN_SET, Manifest
from gpuplex.kube.render import render_plan
from gpuplex.kube.resources import kinds_of_set
from gpuplex.kube.sync import apply_set, diff_set
from gpuplex.specfile import load_spec_file
from tests.kube_real.cluster import ControlPlane, send_json, wait_until

EXAMPLE = Path(__file__).parents[2] / "examples" / "kubernetes-cluster.yaml"
GPUPLEX = Path(sys.executable).parent / "gpuplex"
PREFIX = "aon-"
OPERATOR = f"{PREFIX}gpu-operator"
#: The tenant whose namespace the terminating test leaves Terminating (the last one applied).
GOING = f"{PREFIX}analytics"
HOLD = "gpuplex.dev/test-hold"
WAIT_S = 90.0
#: Kinds that run pods: never applied here, so no pod is ever bound to a node without a kubelet.
WITH_PODS = ("Deployment", "Job")


@dataclass
class Tenants:
    admin: ClientTransport
    control_plane: ControlPlane
    spec_file: Path
    #: What this module applies for real: its namespaces and their objects that run no pods.
    applied: list[Manifest]

    def send(self, method: str, path: str, body: Any = None, **query: str) -> Reply:
        return send_json(self.admin, method, path, body, **query)


def write_spec(path: Path, change: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The example under this module's prefix and GPU operator namespace, changed by `change`."""
    document = yaml.safe_load(EXAMPLE.read_text())
    document["kubernetes"]["namespace_prefix"] = PREFIX
    document["kubernetes"]["gpu_operator_namespace"] = OPERATOR
    if change is not None:
        change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def rendered(spec_file: Path) -> list[Manifest]:
    spec = load_spec_file(spec_file)
    return render_plan(spec, make_plan(spec)).manifests


def gpuplex(tenants: Tenants, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own CLI
        [str(GPUPLEX), "kube", *args, "--kubeconfig", str(tenants.control_plane.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "400"},  # the diff table's rows on one line each
    )


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    return wait_until(what, check, timeout)


@pytest.fixture(scope="module")
def tenants(
    kube_cluster: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tenants]:
    spec_file = write_spec(tmp_path_factory.mktemp("all-or-nothing") / "gpuplex.yaml")
    applied = [
        m
        for m in rendered(spec_file)
        if m["kind"] == "Namespace"
        or (m["metadata"].get("namespace") and m["kind"] not in WITH_PODS)
    ]
    with connect(kube_cluster.kubeconfig) as admin:
        tenants = Tenants(admin, kube_cluster, spec_file, applied)
        operator = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR}}
        created = tenants.send("POST", "/api/v1/namespaces", operator)
        assert created.status == 201, created.text  # the GPU operator's, which it installs
        try:
            changes = apply_set(admin, applied, PLAN_SET, prune=False)
            assert {c.action for c in changes} == {ObjectAction.CREATE}, changes
            yield tenants
        finally:
            _delete_namespaces(tenants)


def _delete_namespaces(tenants: Tenants) -> None:
    """This module's namespaces go, with everything in them; waits a while for them to be gone
    (the namespace controller backs off), so the next module finds the cluster as it was."""
    names = [OPERATOR] + [
        m["metadata"]["name"] for m in tenants.applied if m["kind"] == "Namespace"
    ]
    _release_hold(tenants)
    for name in names:
        tenants.send("DELETE", f"/api/v1/namespaces/{name}")
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and any(
        tenants.send("GET", f"/api/v1/namespaces/{name}").status != 404 for name in names
    ):
        time.sleep(1)


def _release_hold(tenants: Tenants) -> None:
    """Lift the finalizer that keeps the terminating test's namespace Terminating."""
    path = f"/api/v1/namespaces/{GOING}/configmaps/hold"
    if tenants.send("GET", path).status == 200:
        released = tenants.send(
            "PATCH",
            path,
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )
        assert released.status == 200, released.text


# --- what the cluster holds -----------------------------------------------------------------------


def snapshot(tenants: Tenants) -> dict[tuple[str, str, str], str]:
    """(kind, namespace, name) -> resourceVersion of every object of every kind the plan set
    renders (namespaces and nodes included), in all namespaces, whoever made it."""
    out: dict[tuple[str, str, str], str] = {}
    for kind in kinds_of_set(PLAN_SET):
        reply = tenants.send("GET", kind.collection_path())
        if reply.status == 404 and kind.custom:
            continue  # Kueue's kinds, where no test installed its definitions
        assert reply.status == 200, reply.text
        for item in reply.body["items"]:
            meta = item["metadata"]
            key = (kind.kind, meta.get("namespace", ""), meta["name"])
            out[key] = meta["resourceVersion"]
    return out


def settled(tenants: Tenants) -> dict[tuple[str, str, str], str]:
    """A snapshot once the controllers are done with the cluster: two a second apart agree."""

    def agreed() -> dict[tuple[str, str, str], str] | None:
        first = snapshot(tenants)
        time.sleep(1)
        return first if snapshot(tenants) == first else None

    result: dict[tuple[str, str, str], str] = wait_for("the cluster to settle", agreed)
    return result


def unchanged_since(tenants: Tenants, before: dict[tuple[str, str, str], str]) -> list[str]:
    """Every object created, changed or deleted since `before`."""
    after = snapshot(tenants)
    return [
        f"{'/'.join(key)}: {before.get(key)} -> {after.get(key)}"
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    ]


def mine(changes: list[ObjectChange], tenants: Tenants) -> dict[str, ObjectChange]:
    ids = {_object_id(m) for m in tenants.applied}
    return {c.object_id: c for c in changes if c.object_id in ids}


def _object_id(manifest: Manifest) -> str:
    namespace = manifest["metadata"].get("namespace")
    name = manifest["metadata"]["name"]
    return f"{manifest['kind']}/{namespace}/{name}" if namespace else f"{manifest['kind']}/{name}"


# --- keys other field managers add ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "patch", "field"),
    [
        (
            "resourcequotas",
            f"{PREFIX}contoso",
            "gpuplex-quota",
            {"spec": {"hard": {"count/secrets": "5"}}},
            'spec.hard["count/secrets"]',
        ),
        (
            "configmaps",
            OPERATOR,
            "gpuplex-mig-parted-config",
            {"data": {"custom.yaml": "version: v1\n"}},
            'data["custom.yaml"]',
        ),
    ],
    ids=["quota-spec-hard", "config-map-data"],
)
def test_a_key_another_manager_added_shows_in_diff_and_apply_removes_it(
    tenants: Tenants, kind: str, namespace: str, name: str, patch: Manifest, field: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/{kind}/{name}"
    patched = tenants.send(
        "PATCH",
        path,
        patch,
        fieldManager="kubectl-patch",
        content_type="application/merge-patch+json",
    )
    assert patched.status == 200, patched.text
    object_id = f"{'ResourceQuota' if kind == 'resourcequotas' else 'ConfigMap'}/{namespace}/{name}"
    key = next(iter(patch.get("data") or patch["spec"]["hard"]))
    # a forced server-side apply keeps it: force takes over only the fields gpuplex sends
    [manifest] = [m for m in tenants.applied if _object_id(m) == object_id]
    forced = tenants.send(
        "PATCH",
        path,
        manifest,
        fieldManager="gpuplex",
        force="true",
        dryRun="All",
        content_type="application/apply-patch+yaml",
    )
    assert forced.status == 200, forced.text
    assert key in (forced.body.get("data") or forced.body["spec"]["hard"])

    diffed = mine(diff_set(tenants.admin, tenants.applied, PLAN_SET), tenants)

    [changed] = [c for c in diffed.values() if c.action is not ObjectAction.UNCHANGED]
    assert changed.object_id == object_id
    assert changed.fields == (f"{field} (set by kubectl-patch)",)

    applied = apply_set(tenants.admin, tenants.applied, PLAN_SET, prune=False)

    assert [c.object_id for c in applied if c.action is not ObjectAction.UNCHANGED] == [object_id]
    live = tenants.send("GET", path).body
    assert key not in (live.get("data") or live["spec"]["hard"])
    again = mine(diff_set(tenants.admin, tenants.applied, PLAN_SET), tenants)
    assert {c.action for c in again.values()} == {ObjectAction.UNCHANGED}


# --- refusals: diff says so, apply changes nothing ----------------------------------------------


def _refused_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.lstrip().startswith("refused")]


def test_a_missing_gpu_operator_namespace_is_refused_in_diff_and_apply_changes_nothing(
    tenants: Tenants, tmp_path: Path
) -> None:
    def elsewhere(document: dict[str, Any]) -> None:
        document["kubernetes"]["gpu_operator_namespace"] = f"{PREFIX}no-operator"

    spec_file = write_spec(tmp_path / "gpuplex.yaml", elsewhere)
    before = settled(tenants)

    diff = gpuplex(tenants, "diff", str(spec_file))
    apply = gpuplex(tenants, "apply", str(spec_file))

    assert diff.returncode == 1, diff.stdout + diff.stderr
    refused = _refused_lines(diff.stdout)
    assert len(refused) == 2, diff.stdout  # the device-plugin and the MIG-layout ConfigMaps
    assert all(f"ConfigMap/{PREFIX}no-operator/" in line for line in refused)
    assert "2 refused" in diff.stdout.splitlines()[-1]
    assert f"create namespace {PREFIX}no-operator first" in diff.stderr
    assert apply.returncode == 1, apply.stdout + apply.stderr
    assert f"create namespace {PREFIX}no-operator first" in apply.stderr
    assert unchanged_since(tenants, before) == []


def test_a_quota_refusing_a_new_object_is_refused_in_diff_and_apply_changes_nothing(
    tenants: Tenants,
) -> None:
    namespace = f"{PREFIX}hobbyists"
    quotas = f"/api/v1/namespaces/{namespace}/resourcequotas"
    no_deployments = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-deployments"},
        "spec": {"hard": {"count/deployments.apps": "0"}},
    }
    created = tenants.send("POST", quotas, no_deployments)
    assert created.status == 201, created.text
    try:
        wait_for(  # admission enforces a quota once the controller has counted it
            "the quota's status",
            lambda: (
                tenants.send("GET", f"{quotas}/no-deployments").body.get("status", {}).get("hard")
            ),
        )
        before = settled(tenants)

        diff = gpuplex(tenants, "diff", str(tenants.spec_file))
        apply = gpuplex(tenants, "apply", str(tenants.spec_file))

        assert diff.returncode == 1, diff.stdout + diff.stderr
        [refused] = _refused_lines(diff.stdout)
        assert f"Deployment/{namespace}/playground" in refused
        assert "exceeded quota: no-deployments" in refused
        assert "forbidden to" not in diff.stderr  # a quota is no question of roles
        assert apply.returncode == 1, apply.stdout + apply.stderr
        assert "exceeded quota: no-deployments" in apply.stderr
        assert unchanged_since(tenants, before) == []
    finally:
        tenants.send("DELETE", f"{quotas}/no-deployments")


def test_a_terminating_namespace_is_refused_in_diff_and_apply_changes_nothing(
    tenants: Tenants, tmp_path: Path
) -> None:
    hold = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hold", "finalizers": [HOLD]},
    }
    created = tenants.send("POST", f"/api/v1/namespaces/{GOING}/configmaps", hold)
    assert created.status == 201, created.text
    deleted = tenants.send("DELETE", f"/api/v1/namespaces/{GOING}")
    assert deleted.status == 200, deleted.text

    def emptied() -> bool:  # everything but the held ConfigMap is gone; the namespace stays
        left = [key for key in snapshot(tenants) if key[1] == GOING]
        return left == [("ConfigMap", GOING, "hold")]

    wait_for(f"namespace {GOING} to empty but for the held ConfigMap", emptied)

    def fewer_embed_replicas(document: dict[str, Any]) -> None:
        """A new spec that changes another tenant's quota (before the terminating tenant in
        apply order): what apply used to change before it stopped."""
        contoso = next(t for t in document["tenants"] if t["name"] == "contoso")
        next(w for w in contoso["workloads"] if w["name"] == "embed")["replicas"] = 2

    spec_file = write_spec(tmp_path / "gpuplex.yaml", fewer_embed_replicas)
    try:
        before = settled(tenants)

        diff = gpuplex(tenants, "diff", str(spec_file))
        apply = gpuplex(tenants, "apply", str(spec_file))

        assert diff.returncode == 5, diff.stdout + diff.stderr
        going = [m for m in rendered(spec_file) if m["metadata"].get("namespace") == GOING]
        refused = _refused_lines(diff.stdout)
        assert len(refused) == len(going), diff.stdout  # each object of the tenant, its Job too
        for manifest in going:
            assert any(f" {_object_id(manifest)} " in line for line in refused), _object_id(
                manifest
            )
        assert all(f"namespace {GOING} is still being deleted" in line for line in refused)
        assert f"{len(going)} refused" in diff.stdout.splitlines()[-1]
        changed = [line for line in diff.stdout.splitlines() if line.lstrip().startswith("change")]
        assert any(f"ResourceQuota/{PREFIX}contoso/gpuplex-quota" in line for line in changed)
        assert f"namespace {GOING} is still being deleted" in diff.stderr

        assert apply.returncode == 5, apply.stdout + apply.stderr
        assert f"namespace {GOING} is still being deleted" in apply.stderr
        assert apply.stdout == ""  # the check stopped it: nothing created or changed to report
        assert unchanged_since(tenants, before) == []
    finally:
        _release_hold(tenants)
