"""Reading other field managers' GPU fields from `managedFields` as the real API server writes them
(`.` entries for owned maps, `k:{"name":...}` members, a status subresource entry)."""

from __future__ import annotations

from typing import Any

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
