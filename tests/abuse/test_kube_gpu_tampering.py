"""A tenant with edit rights in its namespace tries to get more GPU than the plan gives it by editing
the objects gpuplex manages, then tries to make gpuplex's clean-up remove the wrong thing."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.errors import KubeApiError
from gpuplex.kube.api import KubeApi
from gpuplex.kube.apply import ClientTransport
from gpuplex.kube.diff import ObjectAction
from gpuplex.kube.foreign import foreign_fields
from gpuplex.kube.naming import PLAN_SET
from gpuplex.kube.resources import kind_of
from gpuplex.kube.sync import apply_set
from tests.integration.kube import objects
from tests.integration.kube.conftest import no_threads_left
from tests.integration.kube.fake_api import FakeKubeApi

NS = objects.NS

__all__ = ["no_threads_left"]  # autouse here: the fake server's threads end with each test


def _deployment(api: FakeKubeApi) -> dict[str, Any]:
    return dict(api.get("apps/v1", "Deployment", "chat", NS))


def test_a_gpu_in_an_added_init_container_and_an_odd_resource_name_are_removed_exactly(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    wanted = [objects.namespace(), objects.deployment()]
    apply_set(transport, wanted, PLAN_SET)
    containers = _deployment(api)["spec"]["template"]["spec"]["containers"]
    odd = "nvidia.com/gpu~1/x"  # JSON pointer escapes must not let it name another field
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            **containers[0],
                            "resources": {
                                "limits": {**containers[0]["resources"]["limits"], odd: "1"}
                            },
                        }
                    ],
                    "initContainers": [
                        {
                            "name": "warm",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            }
        }
    }
    api.patch_as("kubectl-edit", "apps/v1", "Deployment", "chat", NS, patch)

    changes = apply_set(transport, wanted, PLAN_SET)

    assert [c.action for c in changes] == [ObjectAction.UNCHANGED, ObjectAction.CHANGE]
    pod = _deployment(api)["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert pod["initContainers"] == [{"name": "warm", "image": "x", "resources": {"limits": {}}}]


def test_reordering_containers_between_read_and_removal_fails_safe(
    api: FakeKubeApi, transport: ClientTransport
) -> None:
    apply_set(transport, [objects.namespace(), objects.deployment()], PLAN_SET)
    live = _deployment(api)
    model = live["spec"]["template"]["spec"]["containers"][0]
    sidecar = {"name": "side", "image": "y", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    spec = {"spec": {"template": {"spec": {"containers": [model, sidecar]}}}}
    api.patch_as("kubectl-edit", "apps/v1", "Deployment", "chat", NS, spec)
    stale = _deployment(api)
    found = foreign_fields(stale, "gpuplex")
    assert [f.path for f in found] == [
        'spec.template.spec.containers[side].resources.limits["nvidia.com/gpu"]'
    ]
    # the tenant swaps the containers after gpuplex read the object
    swapped = {"spec": {"template": {"spec": {"containers": [sidecar, model]}}}}
    api.patch_as("kubectl-edit", "apps/v1", "Deployment", "chat", NS, swapped)
    before = _deployment(api)

    with pytest.raises(KubeApiError, match="HTTP 422"):
        KubeApi(transport).remove_fields(kind_of(stale), stale, found, dry_run=False)

    assert _deployment(api) == before  # nothing removed from the wrong container
