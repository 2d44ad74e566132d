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

Every start is a new attempt. How a starting or running job's process ended (its host's word,
`ProcessEnd`) decides what comes next:

- it ended by itself: exit 0 is `succeeded`; anything else (or no exit status at all: it could not
  start, the VRAM watchdog stopped it) is `failed`, or, while it has retries left
  (`backoff_limit`), `queued` again with a `not before` time (core.jobs.retries);
- gpuplex stopped it on its own (`host down`, `up` stopping) while the store still wanted it to
  run: `queued` again, a new attempt, not counted against its retries, as after a preemption;
- it is gone and nothing recorded how it ended (`lost`: the host restarted, its records were
  lost): `queued` again the same way.

A preempted job whose process ended by itself before it was stopped ends as its exit status says.

What a host reports is only taken once that host has reported since the runner started
(`unheard`: the nodes it has not): until then its jobs stay as they are, and while any job holds
capacity on such a node, nothing is admitted or preempted anywhere (the capacity it holds may be
free already), and queued jobs say so.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuplex.core.jobs.backfill import StepView, admit_and_place
from gpuplex.core.jobs.holdings import plan_holdings, request_ask
from gpuplex.core.jobs.live import grace_s, job_placement, with_jobs, without_workloads
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.reservation import HeldGpus, JobReservation, ends_by_s
from gpuplex.core.jobs.retries import may_retry, not_before_words, retry_delay_s
from gpuplex.core.jobs.states import (
    FINISHED_STATES,
    HOLDING_STATES,
    LEAVING_STATES,
    JobState,
    ProcessEnd,
)
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.queues.admission import Holding, QueuedJob
from gpuplex.core.queues.drf import Resources
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as the store holds it, with what the host last reported of its process: `alive`
    (None: not reported yet) and `exit_code` once it exited; `process_started_s` and `ended_s`,
    when its host saw it start and end; `end`, how it ended. `attempt` counts from 0, `failures`
    are the failed attempts that counted against its retries, `not_before_s` when a retry may
    start."""

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
    attempt: int = 0
    failures: int = 0
    not_before_s: float | None = None
    process_started_s: float | None = None
    ended_s: float | None = None
    end: ProcessEnd | None = None


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of state, with what the host saw of the attempt it ends or starts: its exit code,
    when its process started and ended (None: not known; the store then uses the time of the
    change), for a retry when it may start, and whether it counts against the job's retries."""

    job_id: str
    state: JobState
    reason: str
    placement: Placement | None = None
    preempted_for: str | None = None
    stopping_to: JobState | None = None
    exit_code: int | None = None
    started_s: float | None = None
    ended_s: float | None = None
    not_before_s: float | None = None
    counts_failure: bool = False


@dataclass(frozen=True, slots=True)
class LifecycleStep:
    """The state changes of this step, every queued job's reason, the live plan, and the
    reservation of the first guaranteed job no node can take now (`core.jobs.backfill`)."""

    transitions: tuple[Transition, ...]
    waiting: dict[str, str]
    live_plan: Plan
    notes: list[str] = field(default_factory=list)
    reservation: JobReservation | None = None


def step(
    spec: GpuplexSpec,
    plan: Plan,
    tree: QueueTree,
    jobs: Sequence[JobRecord],
    now_s: float,
    unheard: Collection[str] = (),
    *,
    usage: Mapping[str, Resources] | None = None,
) -> LifecycleStep:
    """One lifecycle step (see the module docstring). `unheard`: the nodes whose host has not
    reported since the runner started. `usage`: each tenant's decayed past usage, for the
    fair-share order above the guarantees (`gpuplex.core.queues.usage`)."""
    out: list[Transition] = []
    current = {j.id: j for j in jobs if j.state not in FINISHED_STATES}
    for record in list(current.values()):
        change = _ended(_as_heard(record, unheard), now_s)
        if change is None:
            continue
        out.append(change)
        if change.state in FINISHED_STATES:
            del current[record.id]
        else:
            current[record.id] = _moved(record, change)
    holding = [j for j in current.values() if j.state in HOLDING_STATES]
    queued = [j for j in current.values() if j.state is JobState.QUEUED]
    ready = [j for j in queued if j.not_before_s is None or j.not_before_s <= now_s]
    backing_off = {
        j.id: _backoff_reason(j, now_s)
        for j in queued
        if j.not_before_s is not None and j.not_before_s > now_s
    }
    stopping = {job_workload_name(j.id) for j in holding if j.state in LEAVING_STATES}
    stale = sorted({j.placement.node for j in holding if j.placement} & set(unheard))
    if stale:  # what the stale hosts' jobs hold may be free already: decide nothing on it
        why = f"waiting for host {', '.join(stale)}'s first report since the job runner started"
        waiting = {**dict.fromkeys((j.id for j in ready), why), **backing_off}
        return LifecycleStep(
            tuple(out), waiting, without_workloads(_live_plan(plan, holding), stopping)
        )
    holding_files = {j.id: j.job for j in holding}
    queued_files = {j.id: j.job for j in ready}
    grace = {
        job_id: grace_s(tree, job.tenant)
        for job_id, job in {**holding_files, **queued_files}.items()
    }
    # everything holding a GPU stays in the view the jobs are placed against, the jobs that are
    # being stopped too (their GPUs are not free until their processes are gone) ...
    view = StepView(
        spec=spec,
        tree=tree,
        holdings=plan_holdings(plan) + [_holding(j) for j in holding],
        held=[_held(j, now_s, grace[j.id]) for j in holding if j.placement is not None],
        occupied=_live_plan(plan, holding),
        grace_s=grace,
        files=queued_files,
        now_s=now_s,
    )
    queued_asks = [
        QueuedJob(j.id, j.job.tenant, request_ask(j.job.gpu), j.job.priority, j.submitted_s)
        for j in ready
    ]
    starts = admit_and_place(view, queued_asks, usage)
    evicted: set[str] = set()
    for eviction in starts.decision.evictions:
        evicted.add(eviction.victim)
        out.append(
            Transition(
                eviction.victim, JobState.PREEMPTING, eviction.why, preempted_for=eviction.for_job
            )
        )
    for job_id, where in starts.placed.items():
        out.append(Transition(job_id, JobState.STARTING, f"placed on {where.node}", where))
    waiting = {**starts.decision.waiting, **starts.waiting, **backing_off}
    occupied = starts.plan
    # ... but the plan the host runs leaves them out: that is what stops them
    stopping |= {job_workload_name(job_id) for job_id in evicted}
    return LifecycleStep(
        tuple(out), waiting, without_workloads(occupied, stopping), reservation=starts.reservation
    )


def _ended(record: JobRecord, now_s: float) -> Transition | None:
    """What the host's report, a cancellation or the clock makes of a job, before admission."""
    if record.state in LEAVING_STATES:
        return _stopped(record, now_s)
    if record.state is JobState.QUEUED:
        if record.cancel_requested:
            return Transition(record.id, JobState.CANCELLED, "cancelled before it started")
        return None
    # starting or running
    if record.exit_code is not None or record.alive is False:
        if record.end is ProcessEnd.STOPPED:
            if record.cancel_requested:
                return _with_run(record, JobState.CANCELLED, "cancelled; its process is stopped")
            why = f"stopped when gpuplex stopped ({record.exit_note or 'its host stopped it'})"
            return _requeued(record, why)
        if record.end is ProcessEnd.LOST:
            return _requeued(record, f"lost: {record.exit_note or _LOST}")
        return _own_end(record, now_s)
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
        return Transition(
            record.id, JobState.RUNNING, "its process runs", started_s=record.process_started_s
        )
    return None


#: Why a lost job was requeued, when its host gave no words of its own.
_LOST = "its process is gone and nothing recorded how it ended"


def _stopped(record: JobRecord, now_s: float) -> Transition | None:
    """A preempting or stopping job, once its process is gone."""
    if record.alive is not False:
        return None
    if record.state is JobState.PREEMPTING and record.end is ProcessEnd.EXITED:
        return _own_end(record, now_s)  # it ended by itself before it was stopped
    if record.cancel_requested:
        return _with_run(record, JobState.CANCELLED, "cancelled; its process is stopped")
    if record.state is JobState.STOPPING:
        return _with_run(record, record.stopping_to or JobState.CANCELLED, "its process is stopped")
    return _requeued(record, "preempted")


def _own_end(record: JobRecord, now_s: float) -> Transition:
    """A job whose process ended by itself: succeeded, failed, or failed and tried again."""
    code = record.exit_code
    if code == 0:
        return _with_run(record, JobState.SUCCEEDED, "exited 0")
    why = f"exited {code}" if code is not None else (record.exit_note or "its process ended")
    limit = record.job.backoff_limit
    if record.cancel_requested or not may_retry(record.job, record.failures):
        return _with_run(
            record, JobState.FAILED, why + (f"; no retries left ({limit})" if limit else "")
        )
    retry = record.failures + 1
    delay = retry_delay_s(record.job, retry)
    not_before = max(now_s, (record.ended_s or now_s) + delay)
    return replace(
        _requeued(record, f"{why}; retry {retry} of {limit} after {delay:g} s"),
        not_before_s=not_before,
        counts_failure=True,
    )


def _requeued(record: JobRecord, why: str) -> Transition:
    """Back to the queue as the next attempt, its place kept."""
    return _with_run(
        record, JobState.QUEUED, f"{why}; queued again as attempt {record.attempt + 2}"
    )


def _with_run(record: JobRecord, state: JobState, reason: str) -> Transition:
    """A change that ends the current attempt, with what its host saw of it."""
    return Transition(
        record.id,
        state,
        reason,
        exit_code=record.exit_code,
        started_s=record.process_started_s,
        ended_s=record.ended_s,
    )


def _backoff_reason(record: JobRecord, now_s: float) -> str:
    limit = record.job.backoff_limit
    at = not_before_words(record.not_before_s or now_s, now_s)
    return f"retry {record.failures} of {limit} after a failure: not before {at}"


def _as_heard(record: JobRecord, unheard: Collection[str]) -> JobRecord:
    """The record without its host's report while that host has not reported since the runner
    started: what it says may be older than what happened meanwhile."""
    if record.placement is None or record.placement.node not in unheard:
        return record
    return replace(record, alive=None, exit_code=None, end=None, ended_s=None)


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


def _held(record: JobRecord, now_s: float, grace: float) -> HeldGpus:
    """A job holding GPUs, and the latest it has left them: a job being stopped within its grace
    period, a running one at its max runtime (None: it has none)."""
    assert record.placement is not None
    leaving = record.state in LEAVING_STATES
    if leaving:
        free_by: float | None = now_s + grace
    else:
        free_by = ends_by_s(record.job, record.started_s or now_s, grace)
    placement = job_placement(record.id, record.placement)
    return HeldGpus(record.id, record.job, placement, free_by, leaving=leaving)


def _live_plan(plan: Plan, jobs: Sequence[JobRecord]) -> Plan:
    """The applied plan plus the placements of the jobs that hold GPUs."""
    return with_jobs(plan, [job_placement(j.id, j.placement) for j in jobs if j.placement])


def _moved(record: JobRecord, change: Transition) -> JobRecord:
    """The record after a change to a state it does not end in."""
    if change.state is JobState.QUEUED:  # requeued: a fresh attempt, its place kept
        return JobRecord(
            record.id,
            record.job,
            JobState.QUEUED,
            record.submitted_s,
            cancel_requested=record.cancel_requested,
            attempt=record.attempt + 1,
            failures=record.failures + (1 if change.counts_failure else 0),
            not_before_s=change.not_before_s,
        )
    return replace(record, state=change.state, stopping_to=change.stopping_to)
