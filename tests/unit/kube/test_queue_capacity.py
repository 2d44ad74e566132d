"""One capacity model for a tenant's queued Jobs on Kubernetes: Kueue's quotas hold only what the
plan leaves free as the device plugin offers it (MIG slices cut for the queues included), each
tenant's ClusterQueue offers only what its isolation allows, its namespace's queued-Job quota holds
exactly what Kueue may admit, and the admission policies let the Job controller, and nobody else,
make pods at the queued class."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.queue_isolation import Sharing, allowed_sharing, kind_allowed
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.kube.admission import JOB_CONTROLLER_USERS, POLICY_NAME as POD_POLICY
from gpuplex.kube.job_queue_policy import POLICY_NAME as JOB_POLICY
from gpuplex.kube.kueue import NO_KUEUE_NOTE, queue_quotas
from gpuplex.kube.kueue_flavors import kueue_flavors
from gpuplex.kube.naming import QUEUED_PRIORITY_CLASS, Manifest
from gpuplex.kube.node_config import MIG_PARTED_CONFIGMAP, MIG_PARTED_KEY
from gpuplex.kube.queue_slices import queue_mig_slices
from gpuplex.kube.rbac import KUEUE_READ_RULE
from gpuplex.kube.render import render_plan
from gpuplex.kube.tenants import QUEUED_QUOTA_NAME, QUOTA_NAME, STORAGE_QUOTA_NAME
from tests.unit.kube.test_admission import Admission
from tests.unit.kube.test_kueue import SPEC, named, quotas, rendered


def parsed(data: dict[str, Any]) -> GpuplexSpec:
    spec = validate_spec(data)
    assert isinstance(spec, GpuplexSpec), spec
    return spec


def tenant(**fields: Any) -> TenantSpec:
    return TenantSpec.model_validate({"name": "t", **fields})


@pytest.mark.parametrize(
    ("fields", "allowed"),
    [
        ({"isolation": "mig", "regulated": True}, {Sharing.MIG}),
        ({"isolation": "dedicated"}, {Sharing.WHOLE}),
        ({"isolation": "mps"}, {Sharing.MPS}),
        ({"isolation": "timeslice"}, {Sharing.TIMESLICE}),
        ({"regulated": True}, {Sharing.WHOLE, Sharing.MIG}),
        ({"requirement": "moderate"}, {Sharing.WHOLE, Sharing.MIG, Sharing.MPS}),
        ({"requirement": "shared"}, set(Sharing)),
    ],
)
def test_a_tenants_isolation_decides_what_its_queued_jobs_may_hold(
    fields: dict[str, Any], allowed: set[Sharing]
) -> None:
    assert allowed_sharing(tenant(**fields)) == allowed


def test_queue_kinds_map_to_ways_of_sharing() -> None:
    mig_only = frozenset({Sharing.MIG})
    assert kind_allowed("mig:1g.10gb", mig_only)
    assert not kind_allowed("gpus", mig_only)
    assert not kind_allowed("gpu_memory_gib", mig_only)
    assert kind_allowed("compute_percent", frozenset({Sharing.TIMESLICE}))


def test_kueue_holds_only_what_the_plan_leaves_free() -> None:
    spec, plan, _ = rendered()
    flavors = kueue_flavors(spec, plan)
    capacity = flavors.capacity()
    # contoso's planned job holds one of the four H100s; adatum's two replicas two of the four
    # MPS replicas of the L4 node; fabrikam's four slices are cut on the empty MIG A100s
    assert capacity["gpuplex-gpu-h100-80gb", "nvidia.com/gpu"] == 3
    assert capacity["gpuplex-gpu-l40s", "nvidia.com/gpu"] == 2
    assert capacity["gpuplex-shared-mps", "nvidia.com/gpu.shared"] == 2
    assert capacity["gpuplex-mig", "nvidia.com/mig-1g.10gb"] == 4
    engine = flavors.engine_capacity()
    assert engine["gpus"] == 5
    assert engine["mig:1g.10gb"] == 4
    l4 = gpu_model("L4")
    assert l4 is not None
    assert engine["gpu_memory_gib"] == pytest.approx(2 * l4.memory_gib / 2)
    # and the queue engine's tree holds the same
    quotas_ = queue_quotas(spec, plan)
    assert quotas_ is not None
    assert quotas_.tree.capacity == engine


def test_empty_mig_gpus_are_cut_for_the_queues_and_the_layout_says_so() -> None:
    spec, plan, manifests = rendered()
    slices = queue_mig_slices(spec, plan)
    assert slices == {("slices", 0): {"1g.10gb": 4}}
    config = named(manifests, "ConfigMap", MIG_PARTED_CONFIGMAP)
    layouts = yaml.safe_load(config["data"][MIG_PARTED_KEY])["mig-configs"]
    entries = [e for layout in layouts.values() for e in layout if e.get("mig-enabled")]
    assert {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 4}} in entries


def test_a_queue_demand_beyond_one_gpu_is_cut_at_valid_starts_over_several() -> None:
    data = copy.deepcopy(SPEC)
    leaf = data["queues"]["organisations"][0]["teams"][0]["tenants"][1]
    leaf["guarantee"] = {"mig": {"3g.40gb": 3, "1g.10gb": 2}}
    spec = parsed(data)
    slices = queue_mig_slices(spec, make_plan(spec))
    model = gpu_model("A100-80GB")
    assert model is not None
    geometry = model.mig
    assert geometry is not None
    compute = {p.name: p.compute_slices for p in geometry.profiles}
    total: dict[str, int] = {}
    for counts in slices.values():
        assert sum(compute[p] * n for p, n in counts.items()) <= geometry.compute_slices
        for profile, count in counts.items():
            total[profile] = total.get(profile, 0) + count
    assert total == {"3g.40gb": 3, "1g.10gb": 2}  # two GPUs of 3g + 3g (+ 1g) hold it all


def test_a_cluster_queue_offers_only_the_flavors_its_tenants_isolation_allows() -> None:
    _, _, manifests = rendered()
    fabrikam = quotas(named(manifests, "ClusterQueue", "gpuplex-fabrikam"))  # isolation mig
    assert {flavor for flavor, _ in fabrikam} == {"gpuplex-mig", "gpuplex-node"}
    adatum = quotas(named(manifests, "ClusterQueue", "gpuplex-adatum"))  # isolation mps
    assert {flavor for flavor, _ in adatum} == {"gpuplex-shared-mps", "gpuplex-node"}


def test_quantities_are_rendered_as_kueue_stores_them() -> None:
    _, _, manifests = rendered()
    queue = named(manifests, "ClusterQueue", "gpuplex-contoso")["spec"]
    entries = [e for g in queue["resourceGroups"] for f in g["flavors"] for e in f["resources"]]
    for entry in entries:
        for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
            if field in entry:
                assert isinstance(entry[field], str), entry
    assert queue["fairSharing"]["weight"] == "2"


def test_each_tenant_namespace_holds_queued_jobs_to_what_kueue_may_admit() -> None:
    _, _, manifests = rendered()
    own = named(manifests, "ResourceQuota", QUOTA_NAME)  # contoso's comes first
    assert own["metadata"]["namespace"] == "contoso"
    scope = own["spec"]["scopeSelector"]["matchExpressions"][0]
    assert scope == {
        "scopeName": "PriorityClass",
        "operator": "In",
        "values": ["gpuplex-priority-0"],
    }
    assert own["spec"]["hard"]["requests.nvidia.com/gpu"] == "1"  # the planned job
    queued = next(
        m
        for m in manifests
        if m["kind"] == "ResourceQuota"
        and m["metadata"]["name"] == QUEUED_QUOTA_NAME
        and m["metadata"]["namespace"] == "contoso"
    )
    assert queued["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == [
        QUEUED_PRIORITY_CLASS
    ]
    # guarantee 2 + borrowing up to its limit of 4: four whole GPUs, nothing else
    assert queued["spec"]["hard"]["requests.nvidia.com/gpu"] == "4"
    assert queued["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] == "0"
    assert queued["spec"]["hard"]["requests.nvidia.com/gpu.shared"] == "0"
    storage = next(
        m
        for m in manifests
        if m["kind"] == "ResourceQuota" and m["metadata"]["name"] == STORAGE_QUOTA_NAME
    )
    assert set(storage["spec"]["hard"]) == {"persistentvolumeclaims", "requests.storage"}


def test_the_queued_quota_of_a_tenant_that_may_borrow_without_limit_is_the_fleets() -> None:
    _, _, manifests = rendered()
    fabrikam = next(
        m
        for m in manifests
        if m["kind"] == "ResourceQuota"
        and m["metadata"]["name"] == QUEUED_QUOTA_NAME
        and m["metadata"]["namespace"] == "fabrikam"
    )
    assert fabrikam["spec"]["hard"]["requests.nvidia.com/mig-1g.10gb"] == "4"
    assert fabrikam["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"


def pod(priority_class: str, limits: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "priorityClassName": priority_class,
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
    }


def test_only_the_job_controller_makes_pods_at_the_queued_class() -> None:
    _, _, manifests = rendered()
    admission = Admission(named(manifests, "ValidatingAdmissionPolicy", POD_POLICY))
    queued = pod(QUEUED_PRIORITY_CLASS, {"nvidia.com/gpu": "2"})
    for user in JOB_CONTROLLER_USERS:
        assert admission.denials(queued, "contoso", user=user) == []
    [denied] = admission.denials(queued, "contoso", user="alice")
    assert "only the Job controller" in denied
    # a queued pod asks only for what the tenant's queue offers
    slice_ = pod(QUEUED_PRIORITY_CLASS, {"nvidia.com/mig-1g.10gb": "1"})
    assert admission.denials(slice_, "contoso", user=JOB_CONTROLLER_USERS[0])
    assert admission.denials(slice_, "fabrikam", user=JOB_CONTROLLER_USERS[0]) == []
    # the tenant's own pods keep to the plan's grants
    assert admission.denials(pod("gpuplex-priority-0", {"nvidia.com/gpu": "1"}), "contoso") == []


def test_tenants_read_their_local_queue_and_workloads() -> None:
    _, _, manifests = rendered()
    roles = [m for m in manifests if m["kind"] == "Role"]
    assert roles
    assert all(KUEUE_READ_RULE in role["rules"] for role in roles)


def test_without_kubernetes_kueue_the_queues_render_no_kueue_object_and_no_job_policy() -> None:
    data = copy.deepcopy(SPEC)
    del data["kubernetes"]
    spec = parsed(data)
    result = render_plan(spec, make_plan(spec))
    names = {m["metadata"]["name"] for m in result.manifests}
    assert not [m for m in result.manifests if m["apiVersion"].startswith("kueue.x-k8s.io/")]
    assert JOB_POLICY not in names
    assert QUEUED_PRIORITY_CLASS not in names
    assert NO_KUEUE_NOTE in result.notes
    assert not [
        r
        for m in result.manifests
        if m["kind"] == "Role"
        for r in m["rules"]
        if r == KUEUE_READ_RULE
    ]
    quota_names = {m["metadata"]["name"] for m in result.manifests if m["kind"] == "ResourceQuota"}
    assert quota_names == {QUOTA_NAME}


def test_a_queued_job_asking_more_than_one_pod_could_ever_get_is_refused() -> None:
    from tests.unit.kube.test_kueue import QUEUED, job, job_policy

    admission = job_policy()
    # contoso's queue may admit 4 whole GPUs; its node has 5 free: a pod may ask 4
    assert admission.denials(job("x", QUEUED, limits={"nvidia.com/gpu": "4"}), "contoso") == []
    [denied] = admission.denials(job("x", QUEUED, limits={"nvidia.com/gpu": "5"}), "contoso")
    assert "could never run" in denied
    # fabrikam's four slices are all on one A100: a pod may ask all four, not five
    asks = {"nvidia.com/mig-1g.10gb": "4"}
    assert admission.denials(job("x", QUEUED, limits=asks), "fabrikam") == []
    asks = {"nvidia.com/mig-1g.10gb": "5"}
    assert admission.denials(job("x", QUEUED, limits=asks), "fabrikam")
