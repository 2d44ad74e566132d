"""Reading other field managers' fields from `managedFields` as the real API server writes them
(`.` entries for owned maps, `k:{"name":...}` members, a status subresource entry): GPU placement
in a workload's pod template, keys of a quota's `spec.hard` and a ConfigMap's `data`."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, strategies as st

from gpuplex.kube.foreign import foreign_fields, removal

GPU = "f:nvidia.com/mig-7g.80gb"


def deployment(managed: list[dict[str, Any]]) -> dict[str, Any]:
    container = {
        "name": "server",
        "image": "x",
        "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1", "nvidia.com/mig-7g.80gb": "1"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "managedFields": managed},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "warm", "image": "y"}],
                    "containers": [{"name": "sidecar", "image": "z"}, container],
                    "nodeSelector": {"pool.gpuplex.dev/a": "true", "rack": "r1"},
                }
            }
        },
    }


def entry(manager: str, pod_spec: dict[str, Any], **extra: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Apply" if manager == "gpuplex" else "Update",
        "apiVersion": "apps/v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:template": {"f:spec": pod_spec}}},
        **extra,
    }


def limits(*keys: str) -> dict[str, Any]:
    return {
        "f:containers": {
            'k:{"name":"server"}': {
                ".": {},
                "f:name": {},
                "f:resources": {"f:limits": {".": {}, **{k: {} for k in keys}}},
            }
        }
    }


def test_fields_only_another_manager_owns_are_found_with_their_removal() -> None:
    obj = deployment(
        [
            entry(
                "gpuplex",
                {
                    **limits("f:nvidia.com/mig-3g.40gb"),
                    "f:nodeSelector": {"f:pool.gpuplex.dev/a": {}},
                },
            ),
            entry("kubectl-patch", {**limits(GPU), "f:nodeSelector": {"f:rack": {}}}),
            entry("kube-controller-manager", {"f:tolerations": {}}, subresource="status"),
        ]
    )

    found = foreign_fields(obj, "gpuplex")

    assert [(f.path, f.managers) for f in found] == [
        (
            'spec.template.spec.containers[server].resources.limits["nvidia.com/mig-7g.80gb"]',
            ("kubectl-patch",),
        ),
        ('spec.template.spec.nodeSelector["rack"]', ("kubectl-patch",)),
    ]
    assert removal(found) == [
        {"op": "test", "path": "/spec/template/spec/containers/1/name", "value": "server"},
        {
            "op": "remove",
            "path": "/spec/template/spec/containers/1/resources/limits/nvidia.com~1mig-7g.80gb",
        },
        {"op": "remove", "path": "/spec/template/spec/nodeSelector/rack"},
    ]


def test_a_field_gpuplex_shares_with_another_manager_is_gpuplexs() -> None:
    obj = deployment(
        [
            entry("gpuplex", limits("f:nvidia.com/mig-3g.40gb", GPU)),
            entry("kubectl-patch", limits(GPU)),
        ]
    )
    assert foreign_fields(obj, "gpuplex") == []


def test_fields_no_longer_in_the_object_and_kinds_without_pods_are_ignored() -> None:
    obj = deployment([entry("kubectl-patch", limits("f:nvidia.com/gpu"))])
    assert foreign_fields(obj, "gpuplex") == []
    config_map = {"kind": "ConfigMap", "metadata": {"managedFields": []}, "data": {}}
    assert foreign_fields(config_map, "gpuplex") == []


# --- keys of the maps gpuplex renders whole: a quota's spec.hard, a ConfigMap's data -------------


def owner(manager: str, fields: dict[str, Any], **extra: str) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": "Apply" if manager == "gpuplex" else "Update",
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **extra,
    }


def quota(hard: dict[str, str], managed: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpuplex-quota", "namespace": "n", "managedFields": managed},
        "spec": {"hard": hard},
        "status": {"hard": hard, "used": {key: "0" for key in hard}},
    }


def hard_keys(*keys: str) -> dict[str, Any]:
    return {"f:spec": {"f:hard": {".": {}, **{f"f:{key}": {} for key in keys}}}}


def test_a_quota_key_another_manager_added_is_found_with_its_removal() -> None:
    obj = quota(
        {"requests.nvidia.com/gpu": "4", "count/secrets": "5", "pods": "10"},
        [
            owner("gpuplex", hard_keys("requests.nvidia.com/gpu", "pods")),
            owner("kubectl-patch", hard_keys("count/secrets", "pods")),  # pods: shared, ours
            # the quota controller writes status.hard through the status subresource
            owner(
                "kube-controller-manager",
                {"f:status": {"f:hard": {"f:count/configmaps": {}}}},
                subresource="status",
            ),
        ],
    )

    found = foreign_fields(obj, "gpuplex")

    assert [(f.path, f.managers) for f in found] == [
        ('spec.hard["count/secrets"]', ("kubectl-patch",))
    ]
    assert removal(found) == [{"op": "remove", "path": "/spec/hard/count~1secrets"}]


def test_config_map_data_and_binary_data_keys_of_other_managers_are_found() -> None:
    obj = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "gpuplex-mig-parted-config",
            "namespace": "gpu-operator",
            "managedFields": [
                owner("gpuplex", {"f:data": {".": {}, "f:config.yaml": {}}}),
                owner("kubectl-edit", {"f:data": {"f:extra.yaml": {}, "f:gone": {}}}),
                owner("helm", {"f:binaryData": {"f:blob": {}}}),
            ],
        },
        "data": {"config.yaml": "version: v1", "extra.yaml": "x"},
        "binaryData": {"blob": "AAEC"},
    }

    found = foreign_fields(obj, "gpuplex")

    assert [(f.path, f.managers) for f in found] == [
        ('data["extra.yaml"]', ("kubectl-edit",)),  # `gone` is no longer in the object
        ('binaryData["blob"]', ("helm",)),
    ]
    assert removal(found) == [
        {"op": "remove", "path": "/data/extra.yaml"},
        {"op": "remove", "path": "/binaryData/blob"},
    ]


def test_kinds_without_owned_maps_or_pods_have_no_foreign_fields() -> None:
    service = {
        "kind": "Service",
        "metadata": {"managedFields": [owner("kubectl-patch", {"f:spec": {"f:ports": {}}})]},
        "spec": {"ports": [{"port": 80}]},
    }
    assert foreign_fields(service, "gpuplex") == []
    assert foreign_fields(quota({}, [owner("x", hard_keys("pods"))]), "gpuplex") == []


def _removed(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """`patch`'s remove operations applied to a copy of `obj` (RFC 6901 pointers, written out
    here rather than taken from the code under test)."""
    out = copy.deepcopy(obj)
    for operation in patch:
        assert operation["op"] == "remove"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        parent = out
        for part in parts[:-1]:
            parent = parent[part]
        del parent[parts[-1]]
    return out


_QUOTA_KEY = st.text(alphabet="abc./~-", min_size=1, max_size=8)


@given(
    ours=st.sets(_QUOTA_KEY, max_size=5),
    theirs=st.sets(_QUOTA_KEY, max_size=5),
)
def test_removing_the_foreign_keys_leaves_exactly_gpuplexs(
    ours: set[str], theirs: set[str]
) -> None:
    hard = {key: "1" for key in ours | theirs}
    obj = quota(
        hard, [owner("gpuplex", hard_keys(*ours)), owner("kubectl-patch", hard_keys(*theirs))]
    )

    found = foreign_fields(obj, "gpuplex")

    assert {f.path for f in found} == {f'spec.hard["{key}"]' for key in theirs - ours}
    assert set(_removed(obj, removal(found))["spec"]["hard"]) == ours
