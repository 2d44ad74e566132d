"""The real Kueue (v0.17, built from its Go module) admits, holds and preempts batch Jobs asking
for `nvidia.com/gpu` on the real test control plane.

The queue tree: one ResourceFlavor per GPU kind (A100 80GB, H100 80GB, told apart by the GPU
feature discovery label `nvidia.com/gpu.product`), one Cohort, three ClusterQueues in it, a
LocalQueue per tenant namespace, two WorkloadPriorityClasses:

    team-a  A100  nominal 4, may borrow 4     reclaimWithinCohort Any, withinClusterQueue LowerPriority
    team-b  A100  nominal 4, may borrow 2     (same preemption policy)
    team-c  H100  nominal 2, lends nothing    (same preemption policy)

The Jobs go in one at a time, the cluster settling after each (tests/kube_real/kueue_outcome.py):
team-a's first Job fits its quota; its second borrows team-b's idle A100s; team-c's third GPU is
held (no H100 anywhere else); team-b then claims its own quota back, which preempts team-a's
borrowing Job; a Job larger than any quota is held; a high-priority team-c Job preempts team-c's
low-priority one. Admission is quota-based: no node is needed and no pod runs.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from gpuplex.kube.naming import Manifest
from tests.kube_real.kueue_manager import KueueManager
from tests.kube_real.kueue_outcome import (
    GPU,
    JOBS,
    KUEUE,
    Outcome,
    Scenario,
    Submission,
    job_manifest,
    run_scenario,
)

COHORT = "gpu-pool"
PRODUCTS = {"a100-80gb": "NVIDIA-A100-SXM4-80GB", "h100-80gb": "NVIDIA-H100-80GB-HBM3"}
PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


def _cluster_queue(
    name: str, flavor: str, nominal: int, *, borrowing: int | None, lending: int | None
) -> Manifest:
    quota: dict[str, Any] = {"name": GPU, "nominalQuota": nominal}
    if borrowing is not None:
        quota["borrowingLimit"] = borrowing
    if lending is not None:
        quota["lendingLimit"] = lending
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {},
            "preemption": PREEMPTION,
            "resourceGroups": [
                {"coveredResources": [GPU], "flavors": [{"name": flavor, "resources": [quota]}]}
            ],
        },
    }


def queue_tree() -> list[Manifest]:
    objects: list[Manifest] = []
    for team in ("team-a", "team-b", "team-c"):
        objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team}})
    for flavor, product in PRODUCTS.items():
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": {"nvidia.com/gpu.product": product}},
            }
        )
    objects.append({"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": COHORT}})
    for name, value in (("batch-low", 100), ("batch-high", 1000)):
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    objects += [
        _cluster_queue("team-a", "a100-80gb", 4, borrowing=4, lending=4),
        _cluster_queue("team-b", "a100-80gb", 4, borrowing=2, lending=None),
        _cluster_queue("team-c", "h100-80gb", 2, borrowing=None, lending=0),
    ]
    for team in ("team-a", "team-b", "team-c"):
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "gpus", "namespace": team},
                "spec": {"clusterQueue": team},
            }
        )
    return objects


SUBMISSIONS = (
    Submission("a-fits", "team-a", "gpus", 2),
    Submission("c-low", "team-c", "gpus", 2, priority_class="batch-low"),
    Submission("a-borrows", "team-a", "gpus", 4),
    Submission("c-extra", "team-c", "gpus", 1, priority_class="batch-low"),
    Submission("b-reclaims", "team-b", "gpus", 4),
    Submission("b-too-big", "team-b", "gpus", 16),
    Submission("c-urgent", "team-c", "gpus", 2, priority_class="batch-high"),
)


@pytest.fixture(scope="module")
def scenario(kueue: KueueManager, request: pytest.FixtureRequest) -> Scenario:
    result = run_scenario(kueue.admin, queue_tree(), SUBMISSIONS)
    lines = ["", "Kueue's decisions (final):", result.table(), "state after each submission:"]
    for submitted, states in result.steps:
        lines.append(f"  +{submitted:<11} " + "  ".join(f"{k}={v}" for k, v in states.items()))
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the table shows without -s
        sys.stdout.write("\n".join(lines) + "\n")
    return result


def _job(kueue: KueueManager, namespace: str, name: str) -> Manifest:
    reply = kueue.send("GET", f"{JOBS.collection_path(namespace)}/{name}")
    assert reply.status == 200, reply.text
    body: Manifest = reply.body
    return body


def test_jobs_within_nominal_quota_are_admitted_and_unsuspended(
    scenario: Scenario, kueue: KueueManager
) -> None:
    fits = scenario.decision("a-fits")
    assert fits.outcome is Outcome.ADMITTED
    assert fits.flavor == "a100-80gb"
    assert not fits.preempted
    assert scenario.steps[0][1] == {"a-fits": "admitted"}
    job = _job(kueue, "team-a", "a-fits")
    assert job["spec"]["suspend"] is False  # Kueue let it start
    # the flavor's node labels reach the pods: only A100 nodes may take them
    selector = job["spec"]["template"]["spec"].get("nodeSelector", {})
    assert selector.get("nvidia.com/gpu.product") == PRODUCTS["a100-80gb"]


def test_a_queue_borrows_idle_quota_from_its_cohort(scenario: Scenario) -> None:
    # a-borrows takes team-a to 6 A100s of its 4: admitted on team-b's idle quota
    submitted, states = scenario.steps[2]
    assert submitted == "a-borrows"
    assert states["a-borrows"] == "admitted", states


def test_a_job_beyond_its_queues_quota_is_held_with_kueues_reason(
    scenario: Scenario, kueue: KueueManager
) -> None:
    extra = scenario.decision("c-extra")
    assert extra.outcome is Outcome.HELD
    assert "insufficient unused quota" in extra.reason or "insufficient quota" in extra.reason
    assert _job(kueue, "team-c", "c-extra")["spec"]["suspend"] is True


def test_a_job_beyond_all_quota_is_held(scenario: Scenario) -> None:
    too_big = scenario.decision("b-too-big")
    assert too_big.outcome is Outcome.HELD
    assert GPU in too_big.reason, too_big.reason
    assert "16" in too_big.reason, too_big.reason


def test_the_lender_reclaims_its_quota_by_preempting_the_borrower(
    scenario: Scenario, kueue: KueueManager
) -> None:
    assert scenario.steps[3][1]["a-borrows"] == "admitted"  # still borrowing before team-b asks
    reclaims = scenario.decision("b-reclaims")
    assert reclaims.outcome is Outcome.ADMITTED
    assert reclaims.flavor == "a100-80gb"
    borrower = scenario.decision("a-borrows")
    assert borrower.outcome is Outcome.PREEMPTED
    assert borrower.reason.startswith("InCohortReclamation:"), borrower.reason
    assert scenario.steps[4][1]["a-borrows"] == "held"  # requeued: no room to borrow now
    assert _job(kueue, "team-a", "a-borrows")["spec"]["suspend"] is True  # stopped again
    assert scenario.decision("a-fits").outcome is Outcome.ADMITTED  # within nominal: untouched


def test_a_higher_priority_job_preempts_a_lower_one_in_its_queue(scenario: Scenario) -> None:
    assert scenario.decision("c-urgent").outcome is Outcome.ADMITTED
    low = scenario.decision("c-low")
    assert low.outcome is Outcome.PREEMPTED
    assert low.reason.startswith("InClusterQueue:"), low.reason
    assert scenario.decision("c-extra").outcome is Outcome.HELD  # low priority, still no room


def test_kueues_webhook_suspends_a_queued_job_created_running(kueue: KueueManager) -> None:
    job = job_manifest(Submission("webhook-probe", "default", "gpus", 1))
    del job["spec"]["suspend"]
    reply = kueue.send("POST", f"{JOBS.collection_path('default')}?dryRun=All", job)
    assert reply.status == 201, reply.text
    assert reply.body["spec"]["suspend"] is True


def test_kueues_validating_webhook_refuses_moving_a_running_job_to_another_queue(
    scenario: Scenario, kueue: KueueManager
) -> None:
    assert scenario.decision("a-fits").outcome is Outcome.ADMITTED
    moved = {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "elsewhere"}}}
    reply = kueue.admin.send(
        "PATCH",
        f"{JOBS.collection_path('team-a')}/a-fits",
        body=json.dumps(moved),
        content_type="application/merge-patch+json",
    )
    assert reply.status in (400, 403, 422), reply.text
    assert "vjob.kb.io" in reply.text, reply.text
