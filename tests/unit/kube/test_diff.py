"""What a diff reports: changed field paths between the live object and the server's dry run
(bookkeeping and status ignored), what is created, and which listed objects are pruned."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from gpuplex.error_codes import ErrorCode
from gpuplex.kube.diff import (
    ObjectAction,
    ObjectChange,
    changed_fields,
    comparable,
    compare,
    first_stop,
    prune_candidates,
    recreate,
    refused,
    summary,
)
from gpuplex.kube.foreign import ForeignField
from gpuplex.kube.naming import PLAN_SET, SELF_SET, metadata
from gpuplex.kube.resources import KINDS, ResourceKind, object_key

CONFIG_MAP = next(kind for kind in KINDS if kind.kind == "ConfigMap")
NODE = next(kind for kind in KINDS if kind.kind == "Node")
NAMESPACE = next(kind for kind in KINDS if kind.kind == "Namespace")


def live_config_map(data: dict[str, str], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            **metadata("settings", namespace="gpuplex-acme"),
            "uid": "00000000-0000-4000-8000-000000001001",
            "resourceVersion": "1001",
            "creationTimestamp": "2025-03-01T12:00:00Z",
            "managedFields": [{"manager": "gpuplex", "operation": "Apply"}],
            **meta,
        },
        "data": data,
    }


@pytest.mark.parametrize(
    ("before", "after", "paths"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"spec": {"replicas": 2}}, {"spec": {"replicas": 3}}, ["spec.replicas"]),
        ({"data": {}}, {"data": {"k": "v"}}, ["data.k"]),
        ({"data": {"k": "v"}}, {"data": {}}, ["data.k"]),
        (
            {"metadata": {"labels": {"gpuplex.dev/set": "plan"}}},
            {"metadata": {"labels": {"gpuplex.dev/set": "self"}}},
            ['metadata.labels["gpuplex.dev/set"]'],
        ),
        ({"data": {"config.yaml": "a"}}, {"data": {"config.yaml": "b"}}, ['data["config.yaml"]']),
        (
            {"c": [{"image": "a", "name": "m"}]},
            {"c": [{"image": "b", "name": "m"}]},
            ["c[0].image"],
        ),
        ({"c": [1, 2]}, {"c": [1, 2, 3]}, ["c"]),  # a list that grew: the list, not each shift
        ({"v": "1"}, {"v": 1}, ["v"]),
        ({"b": 1, "a": 1}, {"b": 2, "a": 2}, ["a", "b"]),  # sorted, whatever the key order
        ("x", "y", ["(object)"]),
    ],
)
def test_changed_fields(before: Any, after: Any, paths: list[str]) -> None:
    assert changed_fields(before, after) == paths


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(JSON, JSON)
def test_no_changed_fields_exactly_when_equal(before: Any, after: Any) -> None:
    assert (changed_fields(before, after) == []) == (before == after)
    assert changed_fields(before, before) == []


def test_comparable_drops_status_and_bookkeeping_but_keeps_labels() -> None:
    live = live_config_map({"k": "v"}, generation=3)
    live["status"] = {"phase": "Active"}
    kept = comparable(live)
    assert "status" not in kept
    assert set(kept["metadata"]) == {"name", "namespace", "labels"}
    assert live["metadata"]["resourceVersion"] == "1001"  # the argument is left alone


def test_compare_against_the_servers_dry_run() -> None:
    live = live_config_map({"k": "v"})
    same = live_config_map({"k": "v"}, resourceVersion="1002", managedFields=[])
    changed = live_config_map({"k": "w"})
    object_id = "ConfigMap/gpuplex-acme/settings"

    assert compare(object_id, None, changed) == ObjectChange(object_id, ObjectAction.CREATE)
    assert compare(object_id, live, same) == ObjectChange(object_id, ObjectAction.UNCHANGED)
    assert compare(object_id, live, changed) == ObjectChange(
        object_id, ObjectAction.CHANGE, ("data.k",)
    )


def test_compare_adds_what_other_managers_set_that_the_apply_removes() -> None:
    live = live_config_map({"k": "v", "extra": "x"})
    foreign = [ForeignField('data["extra"]', ("kubectl-edit", "helm"), ())]
    object_id = "ConfigMap/gpuplex-acme/settings"

    change = compare(object_id, live, live_config_map({"k": "w", "extra": "x"}), foreign)

    assert change == ObjectChange(
        object_id,
        ObjectAction.CHANGE,
        ("data.k", 'data["extra"] (set by kubectl-edit, helm)'),
        note="removes fields set by helm, kubectl-edit",
    )
    # the apply itself may change nothing: the removal is still a change
    assert compare(object_id, live, live, foreign, stored=True).action is ObjectAction.CHANGE


def test_a_stored_apply_is_unchanged_when_the_server_kept_the_resource_version() -> None:
    live = live_config_map({"k": "v"})
    object_id = "ConfigMap/gpuplex-acme/settings"
    status_written = {**live_config_map({"k": "v"}, resourceVersion="1002"), "status": {"x": 1}}

    assert compare(object_id, live, live, stored=True).action is ObjectAction.UNCHANGED
    # a new resourceVersion from a controller's write between read and apply: contents decide
    assert compare(object_id, live, status_written, stored=True).action is ObjectAction.UNCHANGED
    changed = live_config_map({"k": "w"}, resourceVersion="1002")
    assert compare(object_id, live, changed, stored=True).fields == ("data.k",)


def test_refusals_and_re_creates_carry_the_code_apply_would_stop_with() -> None:
    job_live = {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "1"}]}}}}
    job_wanted = {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "2"}]}}}}
    changes = [
        ObjectChange("Namespace/a", ObjectAction.CREATE),
        recreate("Job/a/j", job_live, job_wanted, ("spec.template",), ErrorCode.KUBE_API),
        refused("ConfigMap/b/c", "namespace b is still being deleted", ErrorCode.KUBE_RETRY_LATER),
    ]

    assert changes[1].fields == ("spec.template.spec.containers[0].image",)
    assert "needs delete and re-create" in changes[1].note
    assert changes[2] == ObjectChange(
        "ConfigMap/b/c",
        ObjectAction.REFUSED,
        note="namespace b is still being deleted",
        code=ErrorCode.KUBE_RETRY_LATER,
    )
    assert first_stop(changes) == changes[1]
    assert first_stop(changes[2:]) == changes[2]
    assert first_stop(changes[:1]) is None
    assert summary(changes) == "1 to create, 1 to re-create, 1 refused"


def listed(name: str, *, set_name: str | None = PLAN_SET, **meta: Any) -> dict[str, Any]:
    """A list item as the API returns it: no apiVersion or kind of its own."""
    labels = metadata(name)["labels"] if set_name else {}
    if set_name:
        labels["gpuplex.dev/set"] = set_name
    return {"metadata": {"name": name, "namespace": "gpuplex-acme", "labels": labels, **meta}}


def test_prune_candidates_are_this_sets_objects_no_longer_rendered() -> None:
    keep = listed("keep")
    old = listed("old")
    other_set = listed("theirs", set_name=SELF_SET)
    unlabelled = listed("kube-root-ca.crt", set_name=None)
    going = listed("going", deletionTimestamp="2025-03-01T12:00:00Z")
    node = {"metadata": {"name": "gpu-a", "labels": metadata("gpu-a")["labels"]}}
    items: list[tuple[ResourceKind, dict[str, Any]]] = [
        (CONFIG_MAP, item) for item in (keep, old, other_set, unlabelled, going)
    ]
    items.append((NODE, node))

    chosen = prune_candidates({object_key(CONFIG_MAP, keep)}, items, PLAN_SET)

    assert chosen == [(CONFIG_MAP, old)]


def test_object_keys_of_cluster_scoped_kinds_ignore_a_namespace() -> None:
    item = {"metadata": {"name": "gpuplex-acme", "namespace": "stray"}}
    assert object_key(NAMESPACE, item) == ("v1", "Namespace", "", "gpuplex-acme")


def test_summary_before_and_after() -> None:
    changes = [
        ObjectChange("a", ObjectAction.CREATE),
        ObjectChange("b", ObjectAction.CREATE),
        ObjectChange("c", ObjectAction.CHANGE, ("data.k",)),
        ObjectChange("d", ObjectAction.UNCHANGED),
        ObjectChange("e", ObjectAction.PRUNE),
        ObjectChange("f", ObjectAction.SKIP, note="not in the cluster"),
    ]
    assert summary(changes) == "2 to create, 1 to change, 1 to prune, 1 skipped, 1 unchanged"
    applied = [
        ObjectChange("a", ObjectAction.CREATE),
        ObjectChange("b", ObjectAction.CHANGE),
        ObjectChange("c", ObjectAction.UNCHANGED),
    ]
    assert summary(applied, done=True) == "1 created, 1 changed, 1 unchanged"
    assert summary([ObjectChange("j", ObjectAction.RECREATE)]) == "1 to re-create"
    assert summary([]) == "nothing to apply"


def test_a_node_keeps_others_taints_and_gets_gpuplexs_pool_taint_in_place_of_the_old_one() -> None:
    from gpuplex.kube.diff import keep_others_taints

    ours = {"key": "gpuplex.dev/pool", "value": "bursty", "effect": "NoSchedule"}
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n"},
        "spec": {"taints": [ours]},
    }
    other = {"key": "example.com/maintenance", "effect": "NoExecute"}
    stale = {"key": "gpuplex.dev/pool", "value": "long-running", "effect": "NoSchedule"}
    live = {"spec": {"taints": [other, stale]}}
    assert keep_others_taints(node, live)["spec"]["taints"] == [other, ours]
    assert node["spec"]["taints"] == [ours]  # the rendered object is not changed
    # a node leaving every pool: gpuplex's taint goes, the others stay
    unpooled: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
    assert keep_others_taints(unpooled, live)["spec"]["taints"] == [other]
    assert keep_others_taints(unpooled, {"spec": {}}) == unpooled
