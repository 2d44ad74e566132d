"""What Kueue decides for a sequence of Job submissions: apply a queue tree (ResourceFlavors,
Cohorts, ClusterQueues, LocalQueues, WorkloadPriorityClasses, namespaces), submit batch/v1 Jobs one
at a time, let the cluster settle after each, and read back from each Job's Workload whether it was
admitted, is held (and Kueue's reason), or was preempted on the way (and why).

`run_scenario(api, objects, submissions)` is all a test needs; it only talks to the API server, so
another test can hand the same tree and submissions to gpuplex's own queue engine and compare the
decisions.

"Settled" means: the new Job's Workload exists and Kueue has tried it (a QuotaReserved condition),
no preemption is in flight (an evicted Workload whose Job's pods are still going away, or one
waiting for the Workloads it preempts), and no Workload changed state for QUIET_S.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuplex.kube.api import Reply, Transport
from gpuplex.kube.naming import Manifest
from gpuplex.kube.resources import ResourceKind

KUEUE = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU = "nvidia.com/gpu"
QUIET_S = 4.0
POLL_S = 0.5
IMAGE = "registry.k8s.io/pause:3.10"
#: Kueue's words for a Workload that waits for the ones it preempts to go.
_AWAITING_PREEMPTION = "Pending the preemption of"
_UIDS = re.compile(r" \((?:UID|JobUID): [^)]*\)")

KINDS = {
    (kind.api_version, kind.kind): kind
    for kind in (
        ResourceKind("v1", "Namespace", "namespaces", namespaced=False),
        ResourceKind(KUEUE, "ResourceFlavor", "resourceflavors", namespaced=False),
        ResourceKind(KUEUE, "Cohort", "cohorts", namespaced=False),
        ResourceKind(KUEUE, "ClusterQueue", "clusterqueues", namespaced=False),
        ResourceKind(KUEUE, "LocalQueue", "localqueues", namespaced=True),
        ResourceKind(KUEUE, "WorkloadPriorityClass", "workloadpriorityclasses", namespaced=False),
    )
}
JOBS = ResourceKind("batch/v1", "Job", "jobs", namespaced=True)
WORKLOADS = ResourceKind(KUEUE, "Workload", "workloads", namespaced=True)


class Outcome(StrEnum):
    ADMITTED = "admitted"
    HELD = "held"
    #: Evicted to make room for another Workload and not admitted again.
    PREEMPTED = "preempted"
    #: The API server refused the Job when it was created (an admission policy): never queued.
    REFUSED = "refused"


@dataclass(frozen=True)
class Submission:
    """One batch/v1 Job of one pod asking `gpus` of `resource`, submitted to a LocalQueue."""

    name: str
    namespace: str
    queue: str
    gpus: int
    priority_class: str | None = None
    resource: str = GPU
    #: The pods' PriorityClass (gpuplex's queued Jobs run at `gpuplex-queued`).
    pod_priority_class: str | None = None


@dataclass(frozen=True)
class Decision:
    job: str  # namespace/name
    queue: str
    gpus: int
    outcome: Outcome
    #: Whether Kueue preempted it at some point (it may have been admitted again since).
    preempted: bool
    #: The flavor its pod set was assigned, when admitted.
    flavor: str
    #: Kueue's words: why it is held, or why it was preempted.
    reason: str


@dataclass
class Scenario:
    decisions: list[Decision]
    #: After each submission: the job submitted and every job's state once settled (`admitted`
    #: or `held`), in submission order.
    steps: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def decision(self, name: str) -> Decision:
        return next(d for d in self.decisions if d.job.split("/")[1] == name)

    def table(self) -> str:
        """The decisions as a fixed-width table, for the test's output."""
        rows = [("job", "queue", "gpus", "outcome", "preempted", "flavor", "reason")]
        rows += [
            (
                d.job,
                d.queue,
                str(d.gpus),
                d.outcome.value,
                "yes" if d.preempted else "",
                d.flavor,
                d.reason[:150],
            )
            for d in self.decisions
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        )


class ScenarioError(AssertionError):
    """The API refused an object, or the cluster did not settle in time."""


def job_manifest(submission: Submission) -> Manifest:
    """The Job: suspended at creation (Kueue's webhook would do it too), one pod, no retries."""
    labels = {QUEUE_LABEL: submission.queue}
    if submission.priority_class is not None:
        labels[PRIORITY_LABEL] = submission.priority_class
    limits = {submission.resource: str(submission.gpus)}
    container = {"name": "main", "image": IMAGE, "resources": {"limits": limits}}
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if submission.pod_priority_class is not None:
        pod["priorityClassName"] = submission.pod_priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": submission.name, "namespace": submission.namespace, "labels": labels},
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {"spec": pod},
        },
    }


def apply(api: Transport, obj: Manifest) -> None:
    """Create `obj` (a kind of KINDS, or a Job); an existing one with that name is an error."""
    kind = JOBS if obj["kind"] == "Job" else KINDS[(obj["apiVersion"], obj["kind"])]
    reply = _send(api, "POST", kind.collection_path(obj["metadata"].get("namespace")), obj)
    if reply.status != 201:
        raise ScenarioError(
            f"creating {obj['kind']} {obj['metadata']['name']}: HTTP {reply.status}: "
            f"{reply.text[:400]}"
        )


def run_scenario(
    api: Transport,
    objects: Sequence[Manifest],
    submissions: Sequence[Submission],
    timeout_s: float = 90.0,
    ready: Callable[[Transport, list[Submission]], bool] | None = None,
) -> Scenario:
    """Apply `objects`, wait until every ClusterQueue is active (and `ready`, when given), then
    submit the Jobs in order, settling after each; the decisions are read once the last has
    settled."""
    for obj in objects:
        apply(api, obj)
    queues = [o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue"]
    _until(
        lambda: all(_active(api, q) for q in queues), "the ClusterQueues to be active", timeout_s
    )
    if ready is not None:
        _until(lambda: ready(api, list(submissions)), "the cluster to be ready", timeout_s)
    scenario = Scenario([])
    history: dict[str, set[str]] = {}
    refused: dict[str, str] = {}
    states: dict[str, str] = {}
    for submission in submissions:
        job = job_manifest(submission)
        reply = _send(api, "POST", JOBS.collection_path(submission.namespace), job)
        if reply.status in (403, 422) and "ValidatingAdmissionPolicy" in reply.text:
            refused[submission.name] = str(reply.body.get("message", reply.text))
        elif reply.status != 201:
            raise ScenarioError(
                f"creating Job {submission.name}: HTTP {reply.status}: {reply.text[:400]}"
            )
        else:
            states = _settle(api, submissions, submission, history, timeout_s)
        scenario.steps.append((submission.name, states))
    workloads = _workloads(api, submissions)
    for submission in submissions:
        if submission.name in refused:
            scenario.decisions.append(
                Decision(
                    f"{submission.namespace}/{submission.name}",
                    submission.queue,
                    submission.gpus,
                    Outcome.REFUSED,
                    False,
                    "",
                    refused[submission.name],
                )
            )
            continue
        scenario.decisions.append(_decision(submission, workloads[submission.name], history))
    return scenario


def _send(api: Transport, method: str, path: str, body: Any = None) -> Reply:
    return api.send(
        method,
        path,
        body=None if body is None else json.dumps(body),
        content_type=None if body is None else "application/json",
    )


def _until(check: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise ScenarioError(f"gave up waiting for {what} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def _active(api: Transport, name: str) -> bool:
    queue = _send(api, "GET", f"{KINDS[(KUEUE, 'ClusterQueue')].collection_path()}/{name}").body
    return _condition(queue, "Active").get("status") == "True"


def _condition(obj: Manifest, kind: str) -> dict[str, Any]:
    conditions = obj.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def _workloads(api: Transport, submissions: Sequence[Submission]) -> dict[str, Manifest]:
    """Job name -> its Workload (found by the Job's uid in the Workload's owner references)."""
    found: dict[str, Manifest] = {}
    for namespace in sorted({s.namespace for s in submissions}):
        jobs = _send(api, "GET", JOBS.collection_path(namespace)).body.get("items", [])
        owners = {job["metadata"]["uid"]: job["metadata"]["name"] for job in jobs}
        for workload in _send(api, "GET", WORKLOADS.collection_path(namespace)).body.get(
            "items", []
        ):
            for owner in workload["metadata"].get("ownerReferences", []):
                if owner["uid"] in owners:
                    found[owners[owner["uid"]]] = workload
    return found


def _state(workload: Manifest) -> str:
    """`admitted`; `evicted` while an eviction is under way (the Workload still holds its quota
    until its Job's pods are gone); `preempting` while it waits for the Workloads it preempts;
    else `held` (an evicted Workload stays Evicted once requeued)."""
    if _condition(workload, "Admitted").get("status") == "True":
        return "admitted"
    evicted = _condition(workload, "Evicted").get("status") == "True"
    reserved = _condition(workload, "QuotaReserved")
    if evicted and reserved.get("status") == "True":
        return "evicted"
    if _AWAITING_PREEMPTION in reserved.get("message", ""):
        return "preempting"
    return "held"


def _tried(workload: Manifest | None) -> bool:
    return workload is not None and bool(_condition(workload, "QuotaReserved"))


def _settle(
    api: Transport,
    submissions: Sequence[Submission],
    newest: Submission,
    history: dict[str, set[str]],
    timeout_s: float,
) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    quiet_since = time.monotonic()
    while True:
        workloads = _workloads(api, submissions)
        states = {name: _state(w) for name, w in workloads.items()}
        for name, workload in workloads.items():
            history.setdefault(name, set()).add(states[name])
            if _preempted(workload):
                history[name].add("preempted")
        if states != last:
            last, quiet_since = states, time.monotonic()
        moving = {"evicted", "preempting"} & set(states.values())
        settled = not moving and _tried(workloads.get(newest.name))
        if settled and time.monotonic() - quiet_since >= QUIET_S:
            return {s.name: states.get(s.name, "-") for s in submissions if s.name in states}
        if time.monotonic() > deadline:
            raise ScenarioError(
                f"the cluster did not settle {timeout_s:.0f} s after {newest.name} was submitted: "
                f"{json.dumps(states)}"
            )
        time.sleep(POLL_S)


def _preempted(workload: Manifest) -> bool:
    """Kueue preempted it: a Preempted condition, an eviction for preemption, or one counted in
    its scheduling statistics."""
    if _condition(workload, "Preempted").get("status") == "True":
        return True
    if _condition(workload, "Evicted").get("reason") == "Preempted":
        return True
    evictions = workload.get("status", {}).get("schedulingStats", {}).get("evictions", [])
    return any(e.get("reason") == "Preempted" for e in evictions)


def _preemption(workload: Manifest) -> str:
    """`InCohortReclamation: Preempted to accommodate a workload due to reclamation within the
    cohort`: the Preempted condition's reason, then its message without the preemptor's uids."""
    condition = _condition(workload, "Preempted") or _condition(workload, "Evicted")
    message = _UIDS.sub("", condition.get("message", ""))
    return f"{condition.get('reason', 'Preempted')}: {message}"


def _decision(submission: Submission, workload: Manifest, history: dict[str, set[str]]) -> Decision:
    state = _state(workload)
    preempted = "preempted" in history.get(submission.name, set()) or _preempted(workload)
    if state == "admitted":
        outcome = Outcome.ADMITTED
    else:
        outcome = Outcome.PREEMPTED if preempted else Outcome.HELD
    flavors = [
        flavor
        for pod_set in workload.get("status", {}).get("admission", {}).get("podSetAssignments", [])
        for flavor in pod_set.get("flavors", {}).values()
    ]
    if outcome is Outcome.HELD:
        reason = _condition(workload, "QuotaReserved").get("message", "")
    elif preempted:
        reason = _preemption(workload)
    else:
        reason = ""
    return Decision(
        f"{submission.namespace}/{submission.name}",
        submission.queue,
        submission.gpus,
        outcome,
        preempted,
        ",".join(sorted(set(flavors))),
        reason,
    )
