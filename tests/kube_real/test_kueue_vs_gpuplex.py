"""The same `queues:` and the same job stream, through the real Kueue (the objects `gpuplex kube
render` makes from the spec, its job policy included) and through gpuplex's own rules on one server
(`check_job` at submission, then `gpuplex.core.queues.admission` on the same capacity, what the plan
leaves free as Kubernetes offers it): every job ends refused, admitted, held or preempted alike,
and after each submission the same jobs run. Both are printed side by side in the test output.
gpuplex's minimum runtime is 0 here, as Kueue has none.

`whole`: one organisation, one team, three tenants on 8 H100s: `alpha` guaranteed 4 GPUs (limit 8),
`beta` guaranteed 4 (limit 6), `gamma` guaranteed none. alpha fits, alpha borrows beta's idle GPUs,
gamma borrows the last ones, beta claims its guarantee back (reclaim: alpha's borrowing job is
preempted), a job larger than the cluster is held, and a high-priority job of beta's preempts
beta's own low-priority one.

`mixed`: four whole L4s, two A100s the plan time-slices (a replica of `paint` runs there, so the
device plugin offers their 4 halves as shared replicas, 3 of them free) and an H100 held in MIG
mode. `bank` is regulated and MIG-only, `studio` and `lab` take whole GPUs, `paint` time-sliced
shares. Borrowing and reclaim of whole GPUs, borrowing of shares, MIG slices admitted and held,
the regulated tenant's whole-GPU job refused when it is submitted, and a preemption inside a queue.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec, check_job
from gpuplex.core.spec.quota_kinds import GPU_MEMORY_GIB, GPUS, MIG_PREFIX
from gpuplex.kube.api import Transport
from gpuplex.kube.kueue import JOB_PRIORITIES, LOCAL_QUEUE
from gpuplex.kube.kueue_flavors import KueueFlavors, kueue_flavors
from gpuplex.kube.naming import QUEUED_PRIORITY_CLASS, Manifest, namespace_for
from gpuplex.kube.render import render_plan
from gpuplex.kube.resources import kind_of
from tests.kube_real.cluster import wait_until
from tests.kube_real.kueue_manager import KueueManager
from tests.kube_real.kueue_outcome import (
    KINDS,
    Outcome,
    Scenario,
    Submission,
    job_manifest,
    run_scenario,
)

MIXED_QUEUES = [
    {"name": "bank", "guarantee": {"mig": {"1g.10gb": 2}}},
    {"name": "studio", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}},
    {"name": "lab", "guarantee": {"gpus": 2}, "limit": {"gpus": 4}},
    {"name": "paint", "guarantee": {"gpu_memory_gib": 40}, "limit": {"gpu_memory_gib": 120}},
]


def whole_spec() -> dict[str, Any]:
    return {
        "fleet": {
            "nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 8, "mig": "off"}]}]
        },
        "tenants": [
            {"name": name, "isolation": "dedicated"} for name in ("alpha", "beta", "gamma")
        ],
        "kubernetes": {"kueue": {}},
        "queues": _queues(
            [
                {"name": "alpha", "guarantee": {"gpus": 4}, "limit": {"gpus": 8}},
                {"name": "beta", "guarantee": {"gpus": 4}, "limit": {"gpus": 6}},
                {"name": "gamma"},
            ]
        ),
    }


def mixed_spec() -> dict[str, Any]:
    canvas = {"name": "canvas", "gpu": {"model": "A100-80GB", "memory_gib": 20}, "replicas": 1}
    return {
        "fleet": {
            "nodes": [
                {"name": "l4", "gpus": [{"model": "L4", "count": 4}]},
                {"name": "ts", "gpus": [{"model": "A100-80GB", "count": 2, "mig": "off"}]},
                {"name": "mig", "gpus": [{"model": "H100-80GB", "count": 1, "mig": "on"}]},
            ]
        },
        "tenants": [
            {"name": "bank", "regulated": True, "isolation": "mig"},
            {"name": "studio", "isolation": "dedicated"},
            {"name": "lab", "isolation": "dedicated"},
            {"name": "paint", "isolation": "timeslice", "workloads": [canvas]},
        ],
        "kubernetes": {"kueue": {}},
        "queues": _queues(MIXED_QUEUES),
    }


def _queues(tenants: list[dict[str, Any]]) -> dict[str, Any]:
    team = {"name": "ml", "tenants": tenants}
    return {
        "preemption": {"min_runtime_s": 0},
        "organisations": [{"name": "acme", "teams": [team]}],
    }


GPU, SHARED, SLICE = "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb"


@dataclass(frozen=True)
class Job:
    name: str
    tenant: str
    count: int
    priority: str = "gpuplex-normal"
    resource: str = GPU


@dataclass(frozen=True)
class Case:
    spec: dict[str, Any]
    stream: list[Job]


CASES = {
    "whole": Case(
        whole_spec(),
        [
            Job("a-fits", "alpha", 2),
            Job("a-borrows", "alpha", 4),
            Job("g-borrows", "gamma", 2),
            Job("b-low", "beta", 1, "gpuplex-low"),
            Job("b-reclaims", "beta", 3),
            Job("b-too-big", "beta", 16),
            Job("b-urgent", "beta", 1, "gpuplex-high"),
        ],
    ),
    "mixed": Case(
        mixed_spec(),
        [
            Job("s-fits", "studio", 2),
            Job("s-borrows", "studio", 2),
            Job("p-fits", "paint", 1, resource=SHARED),
            Job("p-borrows", "paint", 1, resource=SHARED),
            Job("b-slice", "bank", 1, resource=SLICE),
            Job("b-whole", "bank", 1),
            Job("l-reclaims", "lab", 2),
            Job("b-slice-2", "bank", 1, resource=SLICE),
            Job("b-slice-3", "bank", 1, resource=SLICE),
            Job("s-urgent", "studio", 2, "gpuplex-high"),
        ],
    ),
}


def parsed(data: dict[str, Any]) -> GpuplexSpec:
    spec = validate_spec(data)
    assert isinstance(spec, GpuplexSpec), spec
    return spec


def engine_ask(job: Job, flavors: KueueFlavors) -> tuple[dict[str, float], dict[str, Any]]:
    """The job in gpuplex's terms: its resource vector for the queues, and its `gpu:` request."""
    if job.resource == SLICE:
        return {MIG_PREFIX + "1g.10gb": float(job.count)}, {"mig_profile": "1g.10gb"}
    if job.resource == SHARED:
        gib = min(s.replica_gib for s in flavors.shared)
        return {GPU_MEMORY_GIB: job.count * gib}, {"memory_gib": gib}
    return {GPUS: float(job.count)}, {"count": job.count}


@dataclass
class Outcomes:
    outcome: dict[str, Outcome]
    preempted: set[str]
    reason: dict[str, str]
    steps: list[tuple[str, set[str]]]  # after each submission: the jobs admitted


def gpuplex_outcomes(spec: GpuplexSpec, stream: list[Job]) -> Outcomes:
    """Submit the jobs one at a time (a job `check_job` refuses never queues); after each,
    admission rounds until nothing changes, the preempted jobs stopped at once (no grace period
    here) and queued again. The queues hold what Kueue's quotas hold."""
    flavors = kueue_flavors(spec, make_plan(spec))
    tree = queue_tree(spec, flavors.engine_capacity())
    assert tree is not None
    running: list[Holding] = []
    queued: list[QueuedJob] = []
    refused: set[str] = set()
    preempted: set[str] = set()
    reason: dict[str, str] = {}
    steps: list[tuple[str, set[str]]] = []
    for at, job in enumerate(stream, start=1):
        ask, request = engine_ask(job, flavors)
        submitted = JobSpec.model_validate(
            {"tenant": job.tenant, "gpu": request, "command": ["true"]}
        )
        problems = list(check_job(spec, submitted))
        if problems:
            refused.add(job.name)
            reason[job.name] = problems[0].message
            steps.append((job.name, {h.id for h in running}))
            continue
        priority = JOB_PRIORITIES[job.priority]
        queued.append(QueuedJob(job.name, job.tenant, ask, priority, float(at)))
        for _ in range(20):
            decision = admit(tree, running, queued, now_s=1000.0 * at)
            victims = {e.victim for e in decision.evictions}
            for holding in [h for h in running if h.id in victims]:
                running.remove(holding)
                preempted.add(holding.id)
                first = next(j for j in stream if j.name == holding.id)
                queued.append(
                    QueuedJob(
                        holding.id,
                        holding.tenant,
                        holding.resources,
                        holding.priority,
                        float(stream.index(first) + 1),
                    )
                )
            for item in [q for q in queued if q.id in decision.admitted]:
                queued.remove(item)
                running.append(Holding(item.id, item.tenant, item.ask, item.priority, 1000.0 * at))
            reason.update(decision.waiting)
            if not decision.admitted and not decision.evictions:
                break
        steps.append((job.name, {h.id for h in running}))
    admitted = {h.id for h in running}
    outcome = {
        j.name: Outcome.REFUSED
        if j.name in refused
        else Outcome.ADMITTED
        if j.name in admitted
        else Outcome.PREEMPTED
        if j.name in preempted
        else Outcome.HELD
        for j in stream
    }
    return Outcomes(outcome, preempted, reason, steps)


@pytest.fixture(scope="module", params=list(CASES))
def both(
    kueue: KueueManager, request: pytest.FixtureRequest
) -> Iterator[tuple[Case, Scenario, Outcomes]]:
    case = CASES[request.param]
    applied = parsed(case.spec)
    plan = make_plan(applied)
    rendered = render_plan(applied, plan).manifests
    prefix = f"cmp-{request.param}-"
    namespaces = [m for m in rendered if m["kind"] == "Namespace"]  # labelled with their tenant
    kueue_objects = [
        m for m in rendered if (m["apiVersion"], m["kind"]) in KINDS and m["kind"] != "Namespace"
    ]
    objects: list[Manifest] = namespaces + [apart(m, prefix) for m in kueue_objects]
    # the policy that refuses a Job its tenant's queue could never run (named apart: a policy
    # deleted and made again under one name may be enforced as the old one for a moment), and
    # the class it wants
    policy = [
        apart_policy(m, prefix)
        for m in rendered
        if m["metadata"]["name"] == JOB_POLICY or m["metadata"]["name"] == QUEUED_PRIORITY_CLASS
    ]
    submissions = [
        Submission(
            j.name,
            namespace_for(applied, j.tenant),
            LOCAL_QUEUE,
            j.count,
            prefix + j.priority,
            j.resource,
            QUEUED_PRIORITY_CLASS,
        )
        for j in case.stream
    ]
    made = [_create(kueue, m) for m in policy]
    try:
        kueue_side = run_scenario(kueue.admin, objects, submissions, ready=policy_enforced)
        ours = gpuplex_outcomes(applied, case.stream)
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():  # the table shows without -s
            sys.stdout.write(
                f"\nKueue and gpuplex, the same queues: and jobs ({request.param}):\n"
                + side_by_side(case, kueue_side, ours)
                + "\n"
            )
        yield case, kueue_side, ours
    finally:
        for path in reversed(made):  # the policy binds every tenant namespace: others' too
            kueue.admin.send("DELETE", path)
        _delete_namespaces(kueue, [m["metadata"]["name"] for m in namespaces])


def _delete_namespaces(kueue: KueueManager, names: list[str]) -> None:
    """The case's namespaces, with the Jobs Kueue admitted there, whose pods no node takes: left
    behind, every later module's scheduling would go through them too. Their pods are unbound,
    so they go at once."""
    for name in names:
        kueue.admin.send("DELETE", f"/api/v1/namespaces/{name}")
    wait_until(
        "the case's namespaces to go",
        lambda: all(kueue.send("GET", f"/api/v1/namespaces/{n}").status == 404 for n in names),
        timeout=120,
    )


JOB_POLICY = "gpuplex-tenant-job-queue"


def apart_policy(manifest: Manifest, prefix: str) -> Manifest:
    """The Job policy and its binding under a name of this case's own."""
    out = json.loads(json.dumps(manifest))
    if out["kind"].startswith("ValidatingAdmissionPolicy"):
        out["metadata"]["name"] = prefix + out["metadata"]["name"]
    if out["kind"] == "ValidatingAdmissionPolicyBinding":
        out["spec"]["policyName"] = prefix + out["spec"]["policyName"]
    return cast(Manifest, out)


def policy_enforced(api: Transport, submissions: list[Submission]) -> bool:
    """The API server enforces this case's Job policy, and only it: a Job without the queue label
    is refused, and the first Job of the stream is not (the previous case's policy, deleted under
    another name, may be enforced for a moment after, knowing none of this case's namespaces)."""
    first = submissions[0]
    unqueued = job_manifest(Submission("probe", first.namespace, first.queue, 1))
    del unqueued["metadata"]["labels"]
    return _dry_run(api, unqueued) in (403, 422) and _dry_run(api, job_manifest(first)) == 201


def _dry_run(api: Transport, job: Manifest) -> int:
    reply = api.send(
        "POST",
        f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs",
        query=[("dryRun", "All")],
        body=json.dumps(job),
        content_type="application/json",
    )
    return reply.status


def _create(kueue: KueueManager, manifest: Manifest) -> str:
    kind = kind_of(manifest)
    path = kind.collection_path(manifest["metadata"].get("namespace"))
    reply = kueue.send("POST", path, manifest)
    assert reply.status == 201, reply.text
    return kind.object_path(manifest["metadata"]["name"], manifest["metadata"].get("namespace"))


#: The test cluster is shared by the session's tests, and Kueue's flavors, cohorts, queues and
#: priority classes are cluster-wide: this test's get names of their own, so that another test's
#: rendered objects (the same spec names) neither clash with them nor join their cohort.
def apart(obj: Manifest, prefix: str) -> Manifest:
    """`obj` with its cluster-wide Kueue names, and its references to them, prefixed."""
    out = json.loads(json.dumps(obj))
    if out["kind"] in ("ResourceFlavor", "Cohort", "ClusterQueue", "WorkloadPriorityClass"):
        out["metadata"]["name"] = prefix + out["metadata"]["name"]
    spec = out.get("spec", {})
    for field in ("parentName", "cohortName", "clusterQueue"):
        if field in spec:
            spec[field] = prefix + spec[field]
    for group in spec.get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            flavor["name"] = prefix + flavor["name"]
    return cast(Manifest, out)


def side_by_side(case: Case, kueue_side: Scenario, ours: Outcomes) -> str:
    def shown(outcome: Outcome, preempted: bool) -> str:
        again = preempted and outcome is not Outcome.PREEMPTED
        return outcome.value + (" (was preempted)" if again else "")

    rows = [("job", "tenant", "asks", "Kueue", "gpuplex", "gpuplex's reason")]
    for job in case.stream:
        theirs = kueue_side.decision(job.name)
        mine = ours.outcome[job.name]
        reason = "" if mine is Outcome.ADMITTED else ours.reason.get(job.name, "")[:90]
        rows.append(
            (
                job.name,
                job.tenant,
                f"{job.count} {job.resource.removeprefix('nvidia.com/')}",
                shown(theirs.outcome, theirs.preempted),
                shown(mine, job.name in ours.preempted),
                reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


Both = tuple[Case, Scenario, Outcomes]


def test_every_job_ends_the_same_way(both: Both) -> None:
    _, kueue_side, ours = both
    theirs = {d.job.split("/")[1]: d.outcome for d in kueue_side.decisions}
    assert theirs == ours.outcome


def test_the_same_jobs_were_preempted(both: Both) -> None:
    _, kueue_side, ours = both
    assert {d.job.split("/")[1] for d in kueue_side.decisions if d.preempted} == ours.preempted


def test_after_each_submission_the_same_jobs_run(both: Both) -> None:
    _, kueue_side, ours = both
    theirs = [
        (name, {j for j, s in states.items() if s == "admitted"})
        for name, states in kueue_side.steps
    ]
    assert theirs == ours.steps


def test_the_stream_meets_every_rule_it_is_meant_to(both: Both) -> None:
    """The comparison means something only if the stream exercises the rules: borrowing,
    reclaim, preemption, a job that cannot start; and, in the mixed fleet, a refusal by isolation,
    a borrowed share and a slice held for want of another."""
    case, _, ours = both
    outcomes = set(ours.outcome.values())
    assert {Outcome.ADMITTED, Outcome.PREEMPTED} <= outcomes
    assert {Outcome.HELD, Outcome.REFUSED} & outcomes
    assert len(ours.preempted) >= 2
    if case is CASES["mixed"]:
        assert ours.outcome["b-whole"] is Outcome.REFUSED
        assert ours.outcome["p-borrows"] is Outcome.ADMITTED
        assert ours.outcome["b-slice-3"] is Outcome.HELD
