"""Why each queued job waits now, in plain words. Pure.

The admission rules (`gpuplex.core.queues.admission.admit`) run read-only over the queue tree of
the applied spec, with what holds capacity now: the plan's long-running replicas (never
preempted) and the jobs that hold capacity (starting, running or stopping). A queued job the
rules would admit at once is told it is next to start: the runner has not picked it up yet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplex.core.jobs.holdings import plan_holdings, request_ask
from gpuplex.core.plan.model import Plan
from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import queue_tree
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.workloads import GpuRequestSpec

NO_QUEUES = "the applied spec has no queues: no job can start"
ADMITTED = "admitted by the queues: it starts when the job runner picks it up"


@dataclass(frozen=True, slots=True)
class JobAsk:
    """A job as the admission rules see it; `at_s` is when it was submitted (queued jobs) or
    started (running ones), on one clock."""

    id: str
    tenant: str
    gpu: GpuRequestSpec
    priority: int
    at_s: float


def waiting_reasons(
    spec: GpuplexSpec,
    plan: Plan,
    queued: Sequence[JobAsk],
    holding: Sequence[JobAsk],
    now_s: float,
) -> Mapping[str, str]:
    """Per queued job: why it waits now (or that the rules would admit it)."""
    tree = queue_tree(spec)
    if tree is None:
        return {job.id: NO_QUEUES for job in queued}
    holdings = [
        *plan_holdings(plan),
        *(
            Holding(j.id, j.tenant, request_ask(j.gpu), j.priority, started_s=j.at_s)
            for j in holding
        ),
    ]
    jobs = [QueuedJob(j.id, j.tenant, request_ask(j.gpu), j.priority, j.at_s) for j in queued]
    decision = admit(tree, holdings, jobs, now_s)
    reasons = dict(decision.waiting)
    for job_id in decision.admitted:
        reasons[job_id] = ADMITTED
    return reasons
