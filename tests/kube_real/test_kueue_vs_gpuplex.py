"""The same `queues:` and the same job stream, through the real Kueue (the objects `gpuplex kube
render` makes from the spec) and through gpuplex's own admission rules on one server
(`gpuplex.core.queues.admission`): every job ends admitted, held or preempted alike, and after each
submission the same jobs run. Both are printed side by side in the test output.

The tree: one organisation, one team, three tenants on 8 H100s: `alpha` guaranteed 4 GPUs (limit
8), `beta` guaranteed 4 (limit 6), `gamma` guaranteed none. gpuplex's minimum runtime is 0 here, as
Kueue has none. The stream: alpha fits, alpha borrows beta's idle GPUs, gamma borrows the last
ones, beta claims its guarantee back (reclaim: alpha's borrowing job is preempted), a job larger
than the cluster is held, and a high-priority job of beta's preempts beta's own low-priority one.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, cast

import pytest

from gpuplex.core.plan import make_plan
from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import QueueTree, queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.kube.kueue import JOB_PRIORITIES, LOCAL_QUEUE, kueue_manifests
from gpuplex.kube.naming import Manifest, namespace_for
from tests.kube_real.kueue_manager import KueueManager
from tests.kube_real.kueue_outcome import KINDS, Outcome, Scenario, Submission, run_scenario


def spec() -> GpuplexSpec:
    tenant = {"isolation": "dedicated"}
    data: dict[str, Any] = {
        "fleet": {
            "nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 8, "mig": "off"}]}]
        },
        "tenants": [{"name": name, **tenant} for name in ("alpha", "beta", "gamma")],
        "kubernetes": {},
        "queues": {
            "preemption": {"min_runtime_s": 0},
            "organisations": [
                {
                    "name": "acme",
                    "teams": [
                        {
                            "name": "ml",
                            "tenants": [
                                {"name": "alpha", "guarantee": {"gpus": 4}, "limit": {"gpus": 8}},
                                {"name": "beta", "guarantee": {"gpus": 4}, "limit": {"gpus": 6}},
                                {"name": "gamma"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


@dataclass(frozen=True)
class Job:
    name: str
    tenant: str
    gpus: int
    priority: str = "gpuplex-normal"


STREAM = [
    Job("a-fits", "alpha", 2),
    Job("a-borrows", "alpha", 4),
    Job("g-borrows", "gamma", 2),
    Job("b-low", "beta", 1, "gpuplex-low"),
    Job("b-reclaims", "beta", 3),
    Job("b-too-big", "beta", 16),
    Job("b-urgent", "beta", 1, "gpuplex-high"),
]


@dataclass
class Outcomes:
    outcome: dict[str, Outcome]
    preempted: set[str]
    reason: dict[str, str]
    steps: list[tuple[str, set[str]]]  # after each submission: the jobs admitted


def gpuplex_outcomes(tree: QueueTree, stream: list[Job]) -> Outcomes:
    """Submit the jobs one at a time; after each, admission rounds until nothing changes, the
    preempted jobs stopped at once (no grace period here) and queued again."""
    running: list[Holding] = []
    queued: list[QueuedJob] = []
    preempted: set[str] = set()
    reason: dict[str, str] = {}
    steps: list[tuple[str, set[str]]] = []
    for at, job in enumerate(stream, start=1):
        priority = JOB_PRIORITIES[job.priority]
        queued.append(QueuedJob(job.name, job.tenant, {GPUS: float(job.gpus)}, priority, float(at)))
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
        j.name: Outcome.ADMITTED
        if j.name in admitted
        else Outcome.PREEMPTED
        if j.name in preempted
        else Outcome.HELD
        for j in stream
    }
    return Outcomes(outcome, preempted, reason, steps)


@pytest.fixture(scope="module")
def both(kueue: KueueManager, request: pytest.FixtureRequest) -> tuple[Scenario, Outcomes]:
    applied = spec()
    manifests, _ = kueue_manifests(applied, make_plan(applied))
    namespaces = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace_for(applied, t)}}
        for t in ("alpha", "beta", "gamma")
    ]
    kueue_objects = [m for m in manifests if (m["apiVersion"], m["kind"]) in KINDS]
    objects: list[Manifest] = namespaces + [apart(m) for m in kueue_objects]
    submissions = [
        Submission(
            j.name, namespace_for(applied, j.tenant), LOCAL_QUEUE, j.gpus, APART + j.priority
        )
        for j in STREAM
    ]
    kueue_side = run_scenario(kueue.admin, objects, submissions)
    tree = queue_tree(applied)
    assert tree is not None
    ours = gpuplex_outcomes(tree, STREAM)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the table shows without -s
        sys.stdout.write(
            "\nKueue and gpuplex, the same queues: and jobs:\n"
            + side_by_side(kueue_side, ours)
            + "\n"
        )
    return kueue_side, ours


#: The test cluster is shared by the session's tests, and Kueue's flavors, cohorts, queues and
#: priority classes are cluster-wide: this test's get names of their own, so that another test's
#: rendered objects (the same spec names) neither clash with them nor join their cohort.
APART = "cmp-"


def apart(obj: Manifest) -> Manifest:
    """`obj` with its cluster-wide Kueue names, and its references to them, prefixed."""
    out = json.loads(json.dumps(obj))
    if out["kind"] in ("ResourceFlavor", "Cohort", "ClusterQueue", "WorkloadPriorityClass"):
        out["metadata"]["name"] = APART + out["metadata"]["name"]
    spec = out.get("spec", {})
    for field in ("parentName", "cohortName", "clusterQueue"):
        if field in spec:
            spec[field] = APART + spec[field]
    for group in spec.get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            flavor["name"] = APART + flavor["name"]
    return cast(Manifest, out)


def side_by_side(kueue_side: Scenario, ours: Outcomes) -> str:
    def shown(outcome: Outcome, preempted: bool) -> str:
        again = preempted and outcome is not Outcome.PREEMPTED
        return outcome.value + (" (was preempted)" if again else "")

    rows = [("job", "gpus", "Kueue", "gpuplex", "gpuplex's reason")]
    for job in STREAM:
        theirs = kueue_side.decision(job.name)
        mine = ours.outcome[job.name]
        reason = "" if mine is Outcome.ADMITTED else ours.reason.get(job.name, "")[:90]
        rows.append(
            (
                job.name,
                str(job.gpus),
                shown(theirs.outcome, theirs.preempted),
                shown(mine, job.name in ours.preempted),
                reason,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def test_every_job_ends_the_same_way(both: tuple[Scenario, Outcomes]) -> None:
    kueue_side, ours = both
    theirs = {d.job.split("/")[1]: d.outcome for d in kueue_side.decisions}
    assert theirs == ours.outcome


def test_the_same_jobs_were_preempted(both: tuple[Scenario, Outcomes]) -> None:
    kueue_side, ours = both
    assert {d.job.split("/")[1] for d in kueue_side.decisions if d.preempted} == ours.preempted


def test_after_each_submission_the_same_jobs_run(both: tuple[Scenario, Outcomes]) -> None:
    kueue_side, ours = both
    theirs = [
        (name, {j for j, s in states.items() if s == "admitted"})
        for name, states in kueue_side.steps
    ]
    assert theirs == ours.steps
