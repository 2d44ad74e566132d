"""One step of the jobs' lifecycle on one server: from what the store holds and the host reports,
which jobs change state and what the live plan becomes. Pure.

    queued --admitted and placed--> starting --the host runs it--> running --exit 0--> succeeded
       ^                                |                              |--exit != 0--> failed
       |                                |                              |--max runtime--> timed_out
       +--------- its process stopped -- preempting <--reclaimed-------+
                                                                       |--cancelled--> stopping
                                     stopping --its process stopped--> cancelled / timed_out

A job is part of the live plan (the applied revision's plan plus the jobs' placements) while it is
starting or running; taking it out of the live plan is what stops it: the host runtime stops a
replica that leaves its desired state with SIGTERM, then SIGKILL after the job's grace period
(`RestartSpec.stop_grace_s`, the queue's `preemption.grace_s`). A preempted job stays `preempting`,
holding its capacity for the job it was preempted for, until the host reports its process gone;
then it is queued again, keeping its place (its submit time), one attempt more. A running job
cancelled or past its max runtime is `stopping` the same way, and ends `cancelled` or `timed_out`
once its process is gone: until then nothing else is placed on its GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuplex.core.jobs.holdings import plan_holdings, request_ask
from gpuplex.core.jobs.live import grace_s, job_placement, with_jobs
from gpuplex.core.jobs.placement import job_workload_name, place_jobs
from gpuplex.core.jobs.states import FINISHED_STATES, HOLDING_STATES, LEAVING_STATES, JobState
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.drf import Resources
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the store holds it, with what the host last reported of its process: `alive`
    (None: not reported yet) and `exit_code` once it exited."""

    id: str
    job: JobSpec
    state: JobState
    submitted_s: float
    started_s: float | None = None
    placement: Placement | None = None
    preempted_for: str | None = None
    cancel_requested: bool = False
    alive: bool | None = None
    exit_code: int | None = None
    stopping_to: JobState | None = None  # for a stopping job: cancelled or timed_out
    exit_note: str | None = None  # how it ended when there is no exit code (signal, no start)


@dataclass(frozen=True, slots=True)
class Transition:
    job_id: str
    state: JobState
    reason: str
    placement: Placement | None = None
    preempted_for: str | None = None
    stopping_to: JobState | None = None


@dataclass(frozen=True, slots=True)
class LifecycleStep:
    """The state changes of this step, every queued job's reason, and the live plan."""

    transitions: tuple[Transition, ...]
    waiting: dict[str, str]
    live_plan: Plan
    notes: list[str] = field(default_factory=list)


def step(
    spec: GpuplexSpec,
    plan: Plan,
    tree: QueueTree,
    jobs: Sequence[JobRecord],
    now_s: float,
    *,
    usage: Mapping[str, Resources] | None = None,
) -> LifecycleStep:
    """One lifecycle step (see the module docstring). `usage`: each tenant's decayed past usage,
    for the fair-share order above the guarantees (`gpuplex.core.queues.usage`)."""
    out: list[Transition] = []
    current = {j.id: j for j in jobs if j.state not in FINISHED_STATES}
    for record in list(current.values()):
        change = _ended(record, now_s)
        if change is None:
            continue
        out.append(change)
        if change.state in FINISHED_STATES:
            del current[record.id]
        else:
            current[record.id] = _moved(record, change)
    holding = [j for j in current.values() if j.state in HOLDING_STATES]
    queued = [j for j in current.values() if j.state is JobState.QUEUED]
    decision = admit(
        tree,
        plan_holdings(plan) + [_holding(j) for j in holding],
        [
            QueuedJob(j.id, j.job.tenant, request_ask(j.job.gpu), j.job.priority, j.submitted_s)
            for j in queued
        ],
        now_s,
        usage=usage,
    )
    evicted: set[str] = set()
    for eviction in decision.evictions:
        evicted.add(eviction.victim)
        out.append(
            Transition(
                eviction.victim, JobState.PREEMPTING, eviction.why, preempted_for=eviction.for_job
            )
        )
    # everything holding a GPU stays in the view the jobs are placed against, the jobs that are
    # being stopped too (their GPUs are not free until their processes are gone) ...
    occupied = _live_plan(plan, holding)
    waiting = dict(decision.waiting)
    admitted = {job_id: current[job_id].job for job_id in decision.admitted}
    placed: dict[str, Placement] = {}
    if admitted:
        everyone = {**{j.id: j.job for j in holding}, **admitted}
        grace = {job_id: grace_s(tree, job.tenant) for job_id, job in everyone.items()}
        placing = place_jobs(spec, occupied, {j.id: j.job for j in holding}, admitted, grace)
        occupied, placed = placing.plan, dict(placing.placed)
        for job_id, where in placed.items():
            out.append(Transition(job_id, JobState.STARTING, f"placed on {where.node}", where))
        waiting.update(placing.waiting)
    # ... but the plan the host runs leaves them out: that is what stops them
    stopping = {job_workload_name(j.id) for j in holding if j.state in LEAVING_STATES}
    stopping |= {job_workload_name(job_id) for job_id in evicted}
    live = occupied.model_copy(
        update={"placements": [p for p in occupied.placements if p.workload not in stopping]}
    )
    return LifecycleStep(tuple(out), waiting, live)


def _ended(record: JobRecord, now_s: float) -> Transition | None:
    """What the host's report, a cancellation or the clock makes of a job, before admission."""
    if record.state in LEAVING_STATES:
        if record.alive is not False:
            return None
        if record.cancel_requested:
            return Transition(record.id, JobState.CANCELLED, "cancelled; its process is stopped")
        if record.state is JobState.STOPPING:
            final = record.stopping_to or JobState.CANCELLED
            return Transition(record.id, final, "its process is stopped")
        return Transition(record.id, JobState.QUEUED, "preempted; queued again")
    if record.state is JobState.QUEUED:
        if record.cancel_requested:
            return Transition(record.id, JobState.CANCELLED, "cancelled before it started")
        return None
    # starting or running
    if record.exit_code is not None:
        if record.exit_code == 0:
            return Transition(record.id, JobState.SUCCEEDED, "exited 0")
        return Transition(record.id, JobState.FAILED, f"exited {record.exit_code}")
    if record.alive is False:  # it ended with no exit code: killed, or it could not start
        return Transition(record.id, JobState.FAILED, record.exit_note or "its process ended")
    if record.cancel_requested:
        return Transition(
            record.id,
            JobState.STOPPING,
            "cancelled: stopping it (SIGTERM, then SIGKILL after the grace period)",
            stopping_to=JobState.CANCELLED,
        )
    limit = record.job.max_runtime_s
    if limit is not None and record.started_s is not None and now_s - record.started_s >= limit:
        return Transition(
            record.id,
            JobState.STOPPING,
            f"ran past its max runtime of {limit:g} s: stopping it",
            stopping_to=JobState.TIMED_OUT,
        )
    if record.state is JobState.STARTING and record.alive:
        return Transition(record.id, JobState.RUNNING, "its process runs")
    return None


def _holding(record: JobRecord) -> Holding:
    return Holding(
        id=record.id,
        tenant=record.job.tenant,
        resources=request_ask(record.job.gpu),
        priority=record.job.priority,
        started_s=record.started_s or 0.0,
        preemptible=record.state not in LEAVING_STATES,
        stopping_for=record.preempted_for if record.state is JobState.PREEMPTING else None,
    )


def _live_plan(plan: Plan, jobs: Sequence[JobRecord]) -> Plan:
    """The applied plan plus the placements of the jobs that hold GPUs."""
    return with_jobs(plan, [job_placement(j.id, j.placement) for j in jobs if j.placement])


def _moved(record: JobRecord, change: Transition) -> JobRecord:
    """The record after a change to a state it does not end in."""
    if change.state is JobState.QUEUED:  # requeued: a fresh attempt, its place kept
        return JobRecord(record.id, record.job, JobState.QUEUED, record.submitted_s)
    return JobRecord(
        record.id,
        record.job,
        change.state,
        record.submitted_s,
        record.started_s,
        record.placement,
        record.preempted_for,
        record.cancel_requested,
        record.alive,
        record.exit_code,
        change.stopping_to,
        record.exit_note,
    )
