"""`queues:` rendered as Kueue objects: flavors per GPU model, MIG and sharing strategy; the tree as
Cohorts and ClusterQueues with guarantees, limits, lending and borrowing; LocalQueues; every
object valid against Kueue's own CRD schemas; and the policy that sends tenant Jobs through Kueue,
run with cel-python."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.kube.job_queue_policy import POLICY_NAME
from gpuplex.kube.kueue import LOCAL_QUEUE, QUEUE_NAME_LABEL
from gpuplex.kube.kueue_flavors import kueue_flavors, split
from gpuplex.kube.naming import QUEUED_PRIORITY_CLASS, Manifest
from gpuplex.kube.render import render_plan
from gpuplex.kube.resources import apply_order, kind_of
from tests.unit.kube.kube_specs import kube_specs
from tests.unit.kube.kueue_crds import kueue_errors, served_storage_version
from tests.unit.kube.schema import assert_valid
from tests.unit.kube.test_admission import Admission

SPEC: dict[str, Any] = {
    "fleet": {
        "nodes": [
            {
                "name": "whole",
                "pool": "whole",
                "gpus": [
                    {"model": "H100-80GB", "count": 4, "mig": "off"},
                    {"model": "L40S", "count": 2},
                ],
            },
            {
                "name": "slices",
                "pool": "mig",
                "gpus": [{"model": "A100-80GB", "count": 2, "mig": "on"}],
            },
            {"name": "shared", "pool": "mps", "gpus": [{"model": "L4", "count": 2}]},
        ]
    },
    "tenants": [
        {
            "name": "contoso",
            "isolation": "dedicated",
            "workloads": [
                {
                    "name": "train",
                    "kind": "batch",
                    "pool": "whole",
                    "gpu": {"count": 1},
                    "replicas": 1,
                }
            ],
        },
        {"name": "fabrikam", "isolation": "mig"},
        {
            "name": "adatum",
            "isolation": "mps",
            "workloads": [
                {
                    "name": "chat",
                    "pool": "mps",
                    "gpu": {"memory_gib": 8, "compute_percent": 25},
                    "replicas": 2,
                }
            ],
        },
        {"name": "tailspin", "isolation": "dedicated"},
    ],
    "kubernetes": {"kueue": {}},
    "queues": {
        "organisations": [
            {
                "name": "acme",
                "guarantee": {"gpus": 4},
                "limit": {"gpus": 6},
                "teams": [
                    {
                        "name": "research",
                        "guarantee": {"gpus": 3},
                        "tenants": [
                            {
                                "name": "contoso",
                                "guarantee": {"gpus": 2},
                                "limit": {"gpus": 4},
                                "weight": 2,
                            },
                            {
                                "name": "fabrikam",
                                "guarantee": {"mig": {"1g.10gb": 4}},
                                "lend": False,
                            },
                        ],
                    }
                ],
            },
            {
                "name": "globex",
                "teams": [
                    {
                        "name": "ops",
                        "borrow": False,
                        "tenants": [
                            {
                                "name": "adatum",
                                "guarantee": {"gpu_memory_gib": 24},
                                "preemption": {"reclaim": False, "within_queue": "never"},
                            },
                            {"name": "tailspin", "guarantee": {"gpus": 1}, "borrow": False},
                        ],
                    }
                ],
            },
        ]
    },
}

H100, L40S = "gpuplex-gpu-h100-80gb", "gpuplex-gpu-l40s"
MPS, MIG = "gpuplex-shared-mps", "gpuplex-mig"


def rendered(spec_dict: dict[str, Any] = SPEC) -> tuple[GpuplexSpec, Plan, list[Manifest]]:
    spec = validate_spec(spec_dict)
    assert isinstance(spec, GpuplexSpec), spec
    plan = make_plan(spec)
    return spec, plan, render_plan(spec, plan).manifests


def kueue(manifests: list[Manifest]) -> list[Manifest]:
    return [m for m in manifests if m["apiVersion"].startswith("kueue.x-k8s.io/")]


def named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name)


def quotas(manifest: Manifest) -> dict[tuple[str, str], dict[str, Any]]:
    """(flavor, resource) -> its quota entry (without the name), counts as numbers (Kueue's
    quantities are rendered as strings: `test_quantities_are_rendered_as_kueue_stores_them`)."""
    return {
        (flavor["name"], entry["name"]): {
            k: int(v) if isinstance(v, str) and v.isdigit() else v
            for k, v in entry.items()
            if k != "name"
        }
        for group in manifest["spec"].get("resourceGroups", [])
        for flavor in group["flavors"]
        for entry in flavor["resources"]
    }


def test_objects_and_their_order() -> None:
    _, _, manifests = rendered()
    names = [(m["kind"], m["metadata"]["name"]) for m in kueue(manifests)]
    assert names == [
        ("ResourceFlavor", H100),
        ("ResourceFlavor", L40S),
        ("ResourceFlavor", MPS),
        ("ResourceFlavor", MIG),
        ("ResourceFlavor", "gpuplex-node"),
        ("WorkloadPriorityClass", "gpuplex-low"),
        ("WorkloadPriorityClass", "gpuplex-normal"),
        ("WorkloadPriorityClass", "gpuplex-high"),
        ("Cohort", "gpuplex"),
        ("Cohort", "gpuplex-acme"),
        ("Cohort", "gpuplex-research"),
        ("Cohort", "gpuplex-globex"),
        ("Cohort", "gpuplex-ops"),
        *[("ClusterQueue", f"gpuplex-{t}") for t in ("contoso", "fabrikam", "adatum", "tailspin")],
        *[("LocalQueue", LOCAL_QUEUE)] * 4,
    ]
    # applied after the namespaces their LocalQueues live in, and after every built-in kind
    ordered = [m["kind"] for _, m in apply_order(manifests)]
    assert ordered.index("ResourceFlavor") > max(
        i for i, kind in enumerate(ordered) if not kind_of_is_kueue(kind)
    )


def kind_of_is_kueue(kind: str) -> bool:
    return kind in {
        "ResourceFlavor",
        "WorkloadPriorityClass",
        "Cohort",
        "ClusterQueue",
        "LocalQueue",
    }


def test_flavors_select_nodes_as_the_device_plugin_and_gfd_label_them() -> None:
    _, _, manifests = rendered()
    labels = {
        m["metadata"]["name"]: m["spec"].get("nodeLabels")
        for m in manifests
        if m["kind"] == "ResourceFlavor"
    }
    assert labels == {
        H100: {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        L40S: {"nvidia.com/gpu.product": "NVIDIA-L40S"},
        MPS: {"nvidia.com/gpu.sharing-strategy": "mps"},
        MIG: None,  # the resource name nvidia.com/mig-<profile> finds the nodes
        "gpuplex-node": None,
    }
    # the MIG group holds the profiles cut for the queues: fabrikam's four 1g.10gb slices
    root = named(manifests, "Cohort", "gpuplex")
    mig_group = next(g for g in root["spec"]["resourceGroups"] if g["flavors"][0]["name"] == MIG)
    assert mig_group["coveredResources"] == ["nvidia.com/mig-1g.10gb"]


def test_cohorts_follow_the_tree() -> None:
    _, _, manifests = rendered()
    parents = {
        m["metadata"]["name"]: m["spec"].get("parentName")
        for m in manifests
        if m["kind"] == "Cohort"
    }
    assert parents == {
        "gpuplex": None,
        "gpuplex-acme": "gpuplex",
        "gpuplex-research": "gpuplex-acme",
        "gpuplex-globex": "gpuplex",
        "gpuplex-ops": "gpuplex-globex",
    }
    cohorts = {
        m["metadata"]["name"]: m["spec"]["cohortName"]
        for m in manifests
        if m["kind"] == "ClusterQueue"
    }
    assert cohorts == {
        "gpuplex-contoso": "gpuplex-research",
        "gpuplex-fabrikam": "gpuplex-research",
        "gpuplex-adatum": "gpuplex-ops",
        "gpuplex-tailspin": "gpuplex-ops",
    }


def test_guarantees_are_carved_out_of_the_parents_and_add_up_to_the_fleet() -> None:
    spec, plan, manifests = rendered()
    # contoso's planned job holds one of the 4 H100s: acme holds the other 3 and an L40S;
    # research the 3 H100s, contoso 2 of them: each Cohort keeps the rest
    assert (
        quotas(named(manifests, "ClusterQueue", "gpuplex-contoso"))[H100, "nvidia.com/gpu"][
            "nominalQuota"
        ]
        == 2
    )
    assert (
        quotas(named(manifests, "Cohort", "gpuplex-research"))[H100, "nvidia.com/gpu"][
            "nominalQuota"
        ]
        == 1
    )
    acme = quotas(named(manifests, "Cohort", "gpuplex-acme"))
    assert acme[H100, "nvidia.com/gpu"]["nominalQuota"] == 0
    assert acme[L40S, "nvidia.com/gpu"]["nominalQuota"] == 1
    # the H100s are all acme's, so tailspin's GPU is an L40S
    tailspin = quotas(named(manifests, "ClusterQueue", "gpuplex-tailspin"))
    assert tailspin[H100, "nvidia.com/gpu"]["nominalQuota"] == 0
    assert tailspin[L40S, "nvidia.com/gpu"]["nominalQuota"] == 1
    assert (
        quotas(named(manifests, "ClusterQueue", "gpuplex-fabrikam"))[MIG, "nvidia.com/mig-1g.10gb"][
            "nominalQuota"
        ]
        == 4
    )
    # Kueue adds every Cohort's and ClusterQueue's nominal quota: together, the fleet
    total: Counter[tuple[str, str]] = Counter()
    for manifest in manifests:
        if manifest["kind"] in ("Cohort", "ClusterQueue"):
            for key, entry in quotas(manifest).items():
                if key[0] != "gpuplex-node":
                    total[key] += entry["nominalQuota"]
    assert dict(total) == kueue_flavors(spec, plan).capacity()


def test_limits_lending_and_borrowing() -> None:
    _, _, manifests = rendered()
    contoso = quotas(named(manifests, "ClusterQueue", "gpuplex-contoso"))
    gpus = [contoso[f, "nvidia.com/gpu"] for f in (H100, L40S)]
    # limit 4 - guarantee 2: 2 to borrow, over the models that have room, never above the limit
    assert sum(q["borrowingLimit"] for q in gpus) == 2
    assert all("lendingLimit" not in q for q in gpus)
    # isolation dedicated: contoso's queue offers no MIG slices, whatever it could borrow
    assert (MIG, "nvidia.com/mig-1g.10gb") not in contoso
    acme = quotas(named(manifests, "Cohort", "gpuplex-acme"))
    assert sum(acme[f, "nvidia.com/gpu"]["borrowingLimit"] for f in (H100, L40S)) == 2
    fabrikam = quotas(named(manifests, "ClusterQueue", "gpuplex-fabrikam"))
    assert {q.get("lendingLimit") for k, q in fabrikam.items() if k[0] != "gpuplex-node"} == {0}
    for name in ("gpuplex-tailspin",):
        entries = quotas(named(manifests, "ClusterQueue", name))
        assert {q.get("borrowingLimit") for q in entries.values()} == {0}
    ops = quotas(named(manifests, "Cohort", "gpuplex-ops"))
    assert {q.get("borrowingLimit") for q in ops.values()} == {0}
    root = named(manifests, "Cohort", "gpuplex")
    assert "parentName" not in root["spec"]
    assert all(set(q) == {"nominalQuota"} for q in quotas(root).values())


def test_shared_memory_becomes_device_plugin_replicas() -> None:
    spec, plan, manifests = rendered()
    flavor = kueue_flavors(spec, plan).shared[0]
    # the plan puts adatum's two replicas on one L4, so the device plugin splits it in two
    l4 = gpu_model("L4")
    assert l4 is not None
    assert flavor.strategy == "mps"
    # the plugin shares every full GPU of the node, the idle L4 too; neither is a whole GPU now;
    # of their 2 x 2 replicas adatum's two planned ones hold two
    assert flavor.replicas == 2 * 2 - 2
    assert "gpuplex-gpu-l4" not in [f for f, _, _ in kueue_flavors(spec, plan).gpu]
    assert flavor.replica_gib == pytest.approx(l4.memory_gib / 2)
    assert flavor.replica_percent == 50
    # 24 GiB of shared memory: two replicas of ~11.2 GiB (rounded down, never more)
    adatum = quotas(named(manifests, "ClusterQueue", "gpuplex-adatum"))
    assert adatum[MPS, "nvidia.com/gpu.shared"]["nominalQuota"] == 2
    assert kueue_flavors(spec, plan).counts({"gpu_memory_gib": 24, "compute_percent": 50}) == {
        "shared": 1
    }


def test_cluster_queue_rules() -> None:
    _, _, manifests = rendered()
    contoso = named(manifests, "ClusterQueue", "gpuplex-contoso")["spec"]
    assert contoso["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "contoso"}
    }
    assert contoso["preemption"] == {
        "reclaimWithinCohort": "Any",
        "withinClusterQueue": "LowerPriority",
        "borrowWithinCohort": {"policy": "Never"},
    }
    assert contoso["fairSharing"] == {"weight": "2"}
    assert contoso["queueingStrategy"] == "StrictFIFO"
    adatum = named(manifests, "ClusterQueue", "gpuplex-adatum")["spec"]
    assert adatum["preemption"]["reclaimWithinCohort"] == "Never"
    assert adatum["preemption"]["withinClusterQueue"] == "Never"
    # CPU and memory are covered too, else Kueue would admit no pod asking for them
    node = quotas(named(manifests, "ClusterQueue", "gpuplex-adatum"))
    assert node["gpuplex-node", "cpu"] == {"nominalQuota": 64, "borrowingLimit": 0}
    local = [m for m in manifests if m["kind"] == "LocalQueue"]
    assert {(m["metadata"]["namespace"], m["spec"]["clusterQueue"]) for m in local} == {
        (t, f"gpuplex-{t}") for t in ("contoso", "fabrikam", "adatum", "tailspin")
    }


def test_every_kueue_object_is_valid_against_kueues_crds() -> None:
    _, _, manifests = rendered()
    objects = kueue(manifests)
    problems = [problem for manifest in objects for problem in kueue_errors(manifest)]
    assert not problems, "\n".join(problems)
    for manifest in objects:
        version = manifest["apiVersion"].rpartition("/")[2]
        assert version == served_storage_version(manifest["kind"])
        kind_of(manifest)  # `kube apply` knows the kind
    assert_valid([m for m in manifests if m not in objects])


def test_the_schema_check_can_fail() -> None:
    _, _, manifests = rendered()
    cluster_queue = named(manifests, "ClusterQueue", "gpuplex-contoso")
    broken = {**cluster_queue, "spec": {**cluster_queue["spec"], "cohort": "x"}}
    assert kueue_errors(broken)
    wrong = {**cluster_queue, "spec": {**cluster_queue["spec"], "queueingStrategy": "LIFO"}}
    assert kueue_errors(wrong)


def test_no_queues_no_kueue() -> None:
    without = {k: v for k, v in SPEC.items() if k != "queues"}
    _, _, manifests = rendered(without)
    assert not kueue(manifests)
    assert all(m["metadata"]["name"] != POLICY_NAME for m in manifests)


def job(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    priority_class: str | None = QUEUED_PRIORITY_CLASS,
    limits: dict[str, str] | None = None,
    suspend: bool | None = True,
    kind: str = "Job",
) -> Manifest:
    """A Job (or a CronJob of it) in contoso's namespace, as a tenant writes one."""
    container: dict[str, Any] = {"name": "main", "image": "trainer:1"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if priority_class is not None:
        pod["priorityClassName"] = priority_class
    spec: dict[str, Any] = {"template": {"spec": pod}}
    if suspend is not None:
        spec["suspend"] = suspend
    meta: dict[str, Any] = {"name": name, "namespace": "contoso"}
    if kind == "CronJob":
        template: dict[str, Any] = {"spec": spec}
        if labels is not None:
            template["metadata"] = {"labels": labels}
        return {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": meta,
            "spec": {"schedule": "0 * * * *", "jobTemplate": template},
        }
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


QUEUED = {QUEUE_NAME_LABEL: LOCAL_QUEUE}
KUEUE_USER = "system:serviceaccount:kueue-system:kueue-controller-manager"


def job_policy() -> Admission:
    _, _, manifests = rendered()
    policy = named(manifests, "ValidatingAdmissionPolicy", POLICY_NAME)
    binding = named(manifests, "ValidatingAdmissionPolicyBinding", POLICY_NAME)
    assert binding["spec"]["policyName"] == POLICY_NAME
    return Admission(policy)


def test_tenant_jobs_must_name_their_queue() -> None:
    admission = job_policy()
    denied = admission.denials(job("sweep", priority_class=None), "contoso")
    assert len(denied) == 1
    assert f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE}" in denied[0]
    assert admission.denials(job("sweep", {"team": "x"}), "contoso")
    assert admission.denials(job("sweep", QUEUED), "contoso") == []
    # the plan's own batch workload runs outside the queues, at the tenant's class
    planned = job("train", priority_class="gpuplex-priority-0")
    assert admission.denials(planned, "contoso") == []
    assert admission.denials(planned, "adatum")
    # the label cannot be taken off; a Job from before the queues may still be updated
    old = job("sweep", QUEUED)
    assert admission.denials(job("sweep", {}), "contoso", operation="UPDATE", old=old)
    before = job("old", priority_class=None)
    assert admission.denials(before, "contoso", operation="UPDATE", old=before) == []


def test_queued_jobs_run_at_the_queued_class_and_only_they_do() -> None:
    admission = job_policy()
    [denied] = admission.denials(job("sweep", QUEUED, priority_class=None), "contoso")
    assert QUEUED_PRIORITY_CLASS in denied
    assert admission.denials(job("sweep", QUEUED, priority_class="gpuplex-priority-0"), "contoso")
    # a Job that skips the queue cannot take the queue's quota
    assert admission.denials(job("train"), "contoso")


def test_a_queued_job_asking_what_its_queue_cannot_offer_is_refused_at_creation() -> None:
    admission = job_policy()
    # contoso: isolation dedicated, so whole GPUs only
    assert admission.denials(job("sweep", QUEUED, limits={"nvidia.com/gpu": "2"}), "contoso") == []
    for resource in ("nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"):
        [denied] = admission.denials(job("sweep", QUEUED, limits={resource: "1"}), "contoso")
        assert "could never run" in denied
    # fabrikam: isolation mig; its queue offers the 1g.10gb slices cut for it
    fabrikam = job("sweep", QUEUED, limits={"nvidia.com/mig-1g.10gb": "1"})
    assert admission.denials(fabrikam, "fabrikam") == []
    assert admission.denials(job("sweep", QUEUED, limits={"nvidia.com/gpu": "1"}), "fabrikam")


def test_only_kueue_starts_a_queued_job() -> None:
    admission = job_policy()
    assert admission.denials(job("sweep", QUEUED, suspend=False), "contoso")
    assert admission.denials(job("sweep", QUEUED, suspend=None), "contoso")
    held = job("sweep", QUEUED)
    started = job("sweep", QUEUED, suspend=False)
    [denied] = admission.denials(started, "contoso", operation="UPDATE", old=held)
    assert "only Kueue starts it" in denied
    assert (
        admission.denials(started, "contoso", operation="UPDATE", old=held, user=KUEUE_USER) == []
    )
    # suspending again, or any update of a running Job, is anyone's to make
    assert admission.denials(held, "contoso", operation="UPDATE", old=started) == []
    assert admission.denials(started, "contoso", operation="UPDATE", old=started) == []


def test_a_cronjobs_template_is_checked_when_the_cronjob_is_created() -> None:
    admission = job_policy()
    assert admission.denials(job("nightly", QUEUED, kind="CronJob"), "contoso") == []
    assert admission.denials(job("nightly", kind="CronJob"), "contoso")
    assert admission.denials(job("train", kind="CronJob"), "contoso")  # no plan exemption
    asks_mig = job("nightly", QUEUED, limits={"nvidia.com/mig-1g.10gb": "1"}, kind="CronJob")
    assert admission.denials(asks_mig, "contoso")


def test_split_adds_up() -> None:
    assert split(5, [4, 2, 2]) == [3, 1, 1]
    assert split(2, [0, 0]) == [2, 0]
    assert split(0, [1, 1]) == [0, 0]
    assert sum(split(7, [3, 3, 3])) == 7


def test_shared_quota_without_shared_gpus_is_noted() -> None:
    tenants = [
        {**t, "isolation": "dedicated", "workloads": []} if t["name"] == "adatum" else t
        for t in SPEC["tenants"]
    ]
    spec = GpuplexSpec.model_validate({**SPEC, "tenants": tenants})
    plan = make_plan(spec)
    result = render_plan(spec, plan)
    assert not kueue_flavors(spec, plan).shared
    assert any(note.startswith("queue adatum: its shared GPU memory") for note in result.notes)
    adatum = quotas(named(result.manifests, "ClusterQueue", "gpuplex-adatum"))
    assert all(q["nominalQuota"] == 0 for k, q in adatum.items() if k[0] != "gpuplex-node")
    # the L4s are whole GPUs again
    assert "gpuplex-gpu-l4" in [f for f, _, _ in kueue_flavors(spec, plan).gpu]


@st.composite
def specs_with_queues(draw: st.DrawFn) -> dict[str, Any]:
    """A Kubernetes-shaped spec with its tenants in one or two organisations of one team each,
    with random GPU guarantees, limits and lend/borrow flags; only valid ones are kept."""
    data = draw(kube_specs()).model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    tenants = [t["name"] for t in data["tenants"]]
    cut = draw(st.integers(0, len(tenants)))
    organisations = []
    for index, members in enumerate((tenants[:cut], tenants[cut:])):
        if not members:
            continue
        leaves = []
        for name in members:
            leaf: dict[str, Any] = {"name": name, "guarantee": {"gpus": draw(st.integers(0, 2))}}
            if draw(st.booleans()):
                leaf["limit"] = {"gpus": leaf["guarantee"]["gpus"] + draw(st.integers(0, 3))}
            leaf["lend"], leaf["borrow"] = draw(st.booleans()), draw(st.booleans())
            leaves.append(leaf)
        team = {"name": f"team-{index}", "tenants": leaves}
        organisations.append({"name": f"org-{index}", "teams": [team]})
    data["queues"] = {"organisations": organisations}
    data.setdefault("kubernetes", {})["kueue"] = {}
    assume(isinstance(validate_spec(data), GpuplexSpec))
    return data


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(specs_with_queues())
def test_any_valid_queues_render_to_valid_quotas_that_add_up(data: dict[str, Any]) -> None:
    spec, plan, manifests = rendered(data)
    objects = kueue(manifests)
    problems = [problem for manifest in objects for problem in kueue_errors(manifest)]
    assert not problems, "\n".join(problems)
    total: Counter[tuple[str, str]] = Counter()
    for manifest in objects:
        if manifest["kind"] in ("Cohort", "ClusterQueue"):
            for key, entry in quotas(manifest).items():
                if key[0] == "gpuplex-node":
                    continue
                assert entry["nominalQuota"] >= 0
                assert entry.get("borrowingLimit", 0) >= 0
                total[key] += entry["nominalQuota"]
    capacity = kueue_flavors(spec, plan).capacity()
    assert {k: v for k, v in total.items() if v} == {k: v for k, v in capacity.items() if v}
    # no tenant can go above its limit: guarantee + what it may borrow, over the GPU flavors
    for queue in data["queues"]["organisations"]:
        for leaf in queue["teams"][0]["tenants"]:
            entries = quotas(named(objects, "ClusterQueue", f"gpuplex-{leaf['name']}"))
            gpus = [q for (_, resource), q in entries.items() if resource == "nvidia.com/gpu"]
            if not leaf["borrow"]:
                assert all(q.get("borrowingLimit") == 0 for q in gpus)
            elif "limit" in leaf and gpus:
                most = sum(q["nominalQuota"] + q["borrowingLimit"] for q in gpus)
                assert most <= max(leaf["limit"]["gpus"], sum(q["nominalQuota"] for q in gpus))


def test_whole_gpus_the_plan_shares_are_not_guaranteed() -> None:
    """The L4 node shares its GPUs and contoso's planned job holds an H100: a guarantee of 7
    whole GPUs gets the other 5 H100s and L40Ss."""
    queues = {
        "organisations": [
            {
                "name": "acme",
                "teams": [
                    {"name": "research", "tenants": [{"name": "contoso", "guarantee": {"gpus": 7}}]}
                ],
            }
        ]
    }
    spec_dict = {**SPEC, "queues": queues}
    spec = GpuplexSpec.model_validate(spec_dict)
    result = render_plan(spec, make_plan(spec))
    contoso = quotas(named(result.manifests, "ClusterQueue", "gpuplex-contoso"))
    assert contoso[H100, "nvidia.com/gpu"]["nominalQuota"] == 3
    assert contoso[L40S, "nvidia.com/gpu"]["nominalQuota"] == 2
    assert any(
        note.startswith("queue contoso: Kueue's quotas leave out 2 GPUs of its guarantee")
        for note in result.notes
    )
