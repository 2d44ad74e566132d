"""Jobs in the store: what a tenant submitted, where each job is in its life, and the steps it took.

A job's file is stored as validated JSON (`JobSpec`) and read back through the same model. Its
state moves only through `transition`, which checks the move against the state machine
(gpuplex.core.jobs.states), appends a `job_events` row and, for a change of state, an audit entry
(actor `gpuplex` unless told otherwise), all in one transaction. Submitting (`job.submit`) and
cancelling (`job.cancel`) are audited with the caller as actor. Every read that names a tenant
sees only that tenant's jobs. The same transaction opens and closes the job's runs (`job_runs`,
gpuplex.store.job_runs): what it held on a GPU, from when until when, for metering. Submitting
counts the tenant's jobs not finished and those it submitted in the last 60 s, and stores the new
one, under one write lock, so concurrent submits cannot pass the tenant's caps together.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gpuplex import ids
from gpuplex.core.jobs.states import (
    ACTIVE_STATES,
    HOLDING_STATES,
    JobState,
    transition_refusal,
)
from gpuplex.core.plural import counted
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.queues import JobCaps
from gpuplex.errors import JobStateError, NotFoundError, TooManyJobsError
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.job_runs import (
    JobRun,
    close_run,
    job_runs,
    of_job,
    open_run,
    overlapping,
    started_run,
)
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import JobEventRow, JobRow

#: Who the audit log names for the changes the job runner makes.
SYSTEM_ACTOR = "gpuplex"
SUBMITTED = "submitted: waiting for the queues to admit it"
#: The window `JobCaps.max_submits_per_minute` counts over.
SUBMIT_WINDOW = timedelta(seconds=60)
CANCEL_REQUESTED = "cancel requested: the runner stops it"


#: Every id `new_job_id` makes matches this (the API finds job ids in reasons by it).
JOB_ID_PATTERN = r"j[0-9a-f]{8}"


def new_job_id() -> str:
    """`j` + 8 lowercase hex digits: short, and a valid DNS label (it names the job's workload)."""
    return "j" + ids.random_hex(8)


@dataclass(frozen=True, slots=True)
class JobEvent:
    at: datetime  # timezone-aware UTC
    state: JobState
    reason: str


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    tenant: str
    name: str | None
    spec: JobSpec
    priority: int
    state: JobState
    reason: str
    submitted_at: datetime  # timezone-aware UTC, as are the others
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int  # times it went back to the queue: its current attempt, counting from 0
    exit_code: int | None
    placement: dict[str, Any] | None  # where it runs: the runner's placement, as JSON
    actor: str  # who submitted it
    cancel_requested: bool
    preempted_for: str | None = None  # while preempting: the job it makes room for
    failures: int = 0  # failed attempts that counted against its retries (backoff_limit)
    not_before: datetime | None = None  # a queued retry starts no earlier than this


class JobRepository:
    def __init__(self, engine: Engine, *, new_id: Callable[[], str] = new_job_id) -> None:
        self._engine = engine
        self._new_id = new_id

    def submit(
        self, spec: JobSpec, *, now: datetime, actor: str, caps: JobCaps | None = None
    ) -> Job:
        """Store a new queued job of `spec.tenant`, with its first event and a `job.submit` entry.
        With `caps`: TooManyJobsError when the tenant already has that many jobs not finished, or
        submitted that many in the last 60 s (counted under the write lock, so two submits never
        pass a cap together)."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            if caps is not None:
                write_lock(session, StoreLock.AUDIT)
                _check_caps(session, spec.tenant, caps, now)
            row = JobRow(
                id=self._free_id(session),
                tenant=spec.tenant,
                name=spec.name,
                job=spec.model_dump(mode="json"),
                priority=spec.priority,
                state=JobState.QUEUED.value,
                reason=SUBMITTED,
                submitted_at=now,
                attempts=0,
                actor=actor,
                cancel_requested=False,
                failures=0,
            )
            session.add(row)
            session.add(JobEventRow(job_id=row.id, at=now, state=row.state, reason=SUBMITTED))
            session.flush()
            job = _job(row)
            append_audit(
                session,
                at=now,
                actor=actor,
                action="job.submit",
                target=f"{job.tenant}/{job.id}",
                tenant=job.tenant,
                after=_shown(job),
            )
        return job

    def get(self, job_id: str, tenant: str | None = None) -> Job | None:
        """The job, or None; with `tenant`, None for another tenant's job."""
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(JobRow, job_id)
            if row is None or (tenant is not None and row.tenant != tenant):
                return None
            return _job(row)

    def tenants_of(self, job_ids: Collection[str]) -> dict[str, str]:
        """job id -> its tenant, for those of `job_ids` that exist."""
        query = select(JobRow.id, JobRow.tenant).where(JobRow.id.in_(list(job_ids)))
        with store_errors(self._engine), Session(self._engine) as session:
            return {job_id: tenant for job_id, tenant in session.execute(query)}

    def events(self, job_id: str) -> builtins.list[JobEvent]:
        """The job's steps, oldest first."""
        query = select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
        with store_errors(self._engine), Session(self._engine) as session:
            return [JobEvent(r.at, JobState(r.state), r.reason) for r in session.scalars(query)]

    def list(
        self,
        tenant: str | None = None,
        states: Collection[JobState] = (),
        *,
        limit: int | None = None,
        offset: int = 0,
    ) -> builtins.list[Job]:
        """The jobs of `tenant` (every tenant's if None), in `states` (any if empty), newest
        first; with `limit`, at most that many from `offset` on (a page: finished jobs stay, so
        a tenant's whole list grows without end)."""
        query = select(JobRow).order_by(JobRow.submitted_at.desc(), JobRow.id.desc())
        if tenant is not None:
            query = query.where(JobRow.tenant == tenant)
        if states:
            query = query.where(JobRow.state.in_([s.value for s in states]))
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_job(row) for row in session.scalars(query)]

    def active_count(self, tenant: str) -> int:
        """How many jobs of `tenant` have not finished (queued, starting, running, preempting)."""
        with store_errors(self._engine), Session(self._engine) as session:
            return _active_count(session, tenant)

    def active(self) -> builtins.list[Job]:
        """Every tenant's jobs the runner still has work for (queued, starting, running,
        preempting), oldest first."""
        return sorted(self.list(states=ACTIVE_STATES), key=lambda j: (j.submitted_at, j.id))

    def request_cancel(self, job_id: str, tenant: str, *, now: datetime, actor: str) -> Job:
        """Cancel the job: a queued one is cancelled at once; one that holds capacity is marked
        `cancel_requested` and the runner stops it (its state is the runner's to change). Audited
        as `job.cancel`. NotFoundError for no such job of `tenant`; JobStateError when it has
        finished."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)  # read, then write: nobody in between
            row = _row_of(session, job_id, tenant)
            before = _shown(_job(row))
            state = JobState(row.state)
            if state.finished:
                raise JobStateError(f"job {job_id} is {state.value}: there is nothing to cancel")
            row.cancel_requested = True
            if state is JobState.QUEUED:
                _move(session, row, JobState.CANCELLED, f"cancelled by {actor}", now)
            else:
                row.reason = CANCEL_REQUESTED
                session.add(
                    JobEventRow(job_id=row.id, at=now, state=row.state, reason=CANCEL_REQUESTED)
                )
            session.flush()
            job = _job(row)
            append_audit(
                session,
                at=now,
                actor=actor,
                action="job.cancel",
                target=f"{job.tenant}/{job.id}",
                tenant=job.tenant,
                before=before,
                after=_shown(job),
            )
        return job

    def transition(
        self,
        job_id: str,
        new_state: JobState,
        reason: str,
        *,
        now: datetime,
        actor: str = SYSTEM_ACTOR,
        exit_code: int | None = None,
        placement: dict[str, Any] | None = None,
        gpu_share: Decimal | None = None,
        preempted_for: str | None = None,
        started_at: datetime | None = None,
        ended_at: datetime | None = None,
        not_before: datetime | None = None,
        counts_failure: bool = False,
    ) -> Job:
        """Move the job to `new_state` for `reason` (plain words), with a job event and an audit
        entry `job.<state>`. Entering `starting` with a `placement` (a plan Placement as JSON)
        records it and opens a run of the job on it, holding `gpu_share` GPUs (None: the
        placement's compute_percent / 100; a time-slice share without compute_percent must pass
        its share). `started_at`, when its host saw the attempt's process start, becomes the
        run's start (and the job's `started_at`); leaving the states that hold capacity (back to
        `queued`, or finished) closes the run at `ended_at`, when its host saw the process end
        (else `now`), with `exit_code` and `reason`: billing stops when the process stopped, not
        when the runner noticed. Entering `queued` again starts a new attempt: one attempt more,
        no placement, no exit code, `not_before` (a retry's earliest start) and, with
        `counts_failure`, one failure more against its retries. Entering a finished state sets
        `finished_at` and `exit_code`; entering `preempting` records the job it makes room for
        (`preempted_for`). A move the state machine does not allow is a JobStateError; nothing
        changes then."""
        now = aware_utc(now)
        started = _no_later(started_at, now)
        ended = _no_later(ended_at, now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)
            row = _row_of(session, job_id, None)
            before = _shown(_job(row))
            old = JobState(row.state)
            if placement is not None:
                row.placement = placement
            if started is not None and old in HOLDING_STATES:
                row.started_at = started_run(session, row.id, started)
            if old in HOLDING_STATES and new_state not in HOLDING_STATES:
                close_run(session, row.id, new_state, ended or now, exit_code, reason)
            _move(session, row, new_state, reason, now)
            if new_state.finished:
                row.exit_code = exit_code
            if new_state is JobState.QUEUED:
                row.exit_code = None
                row.not_before = aware_utc(not_before) if not_before is not None else None
                row.failures = (row.failures or 0) + (1 if counts_failure else 0)
            row.preempted_for = preempted_for if new_state is JobState.PREEMPTING else None
            if new_state is JobState.STARTING and placement is not None:
                open_run(session, row, placement, gpu_share, now)
            session.flush()
            job = _job(row)
            append_audit(
                session,
                at=now,
                actor=actor,
                action=f"job.{new_state.value}",
                target=f"{job.tenant}/{job.id}",
                tenant=job.tenant,
                detail={"reason": reason},
                before=before,
                after=_shown(job),
            )
        return job

    def runs(
        self, start: datetime, end: datetime, tenant: str | None = None
    ) -> builtins.list[JobRun]:
        """The runs that held capacity at some moment of [start, end), still open ones included
        (of `tenant` only, if given), oldest first."""
        query = overlapping(aware_utc(start), aware_utc(end), tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return job_runs(session, query)

    def runs_of(self, job_id: str) -> builtins.list[JobRun]:
        """Every run of one job, oldest first: one per time it was placed."""
        with store_errors(self._engine), Session(self._engine) as session:
            return job_runs(session, of_job(job_id))

    def _free_id(self, session: Session) -> str:
        for _ in range(8):  # 16**8 ids: a clash is rare, and more than a few is a broken source
            job_id = self._new_id()
            if session.get(JobRow, job_id) is None:
                return job_id
        raise RuntimeError("could not find a free job id: is the id source random?")


def _no_later(at: datetime | None, now: datetime) -> datetime | None:
    """A time a host reported, never after `now` (a host's clock may run ahead)."""
    return None if at is None else min(aware_utc(at), now)


def _check_caps(session: Session, tenant: str, caps: JobCaps, now: datetime) -> None:
    active = _active_count(session, tenant)
    if active >= caps.max_active:
        raise TooManyJobsError(
            f"{tenant} has {counted(active, 'job')} not finished (queued, starting, running or "
            f"preempting), and its queue allows {caps.max_active} (queues: max_active_jobs): "
            "cancel one or wait for one to finish"
        )
    recent_query = (
        select(func.count())
        .select_from(JobRow)
        .where(JobRow.tenant == tenant, JobRow.submitted_at > now - SUBMIT_WINDOW)
    )
    recent = int(session.scalar(recent_query) or 0)
    if recent >= caps.max_submits_per_minute:
        raise TooManyJobsError(
            f"{tenant} submitted {counted(recent, 'job')} in the last 60 s, and its queue allows "
            f"{caps.max_submits_per_minute} (queues: max_submits_per_minute): submit again in a "
            "minute"
        )


def _active_count(session: Session, tenant: str) -> int:
    query = (
        select(func.count())
        .select_from(JobRow)
        .where(JobRow.tenant == tenant, JobRow.state.in_([s.value for s in ACTIVE_STATES]))
    )
    return int(session.scalar(query) or 0)


def _row_of(session: Session, job_id: str, tenant: str | None) -> JobRow:
    row = session.get(JobRow, job_id)
    if row is None or (tenant is not None and row.tenant != tenant):
        raise NotFoundError(f"no job {job_id!r}" + (f" of tenant {tenant!r}" if tenant else ""))
    return row


def _move(session: Session, row: JobRow, new_state: JobState, reason: str, now: datetime) -> None:
    old = JobState(row.state)
    refusal = transition_refusal(old, new_state)
    if refusal is not None:
        raise JobStateError(f"job {row.id}: {refusal}")
    if new_state is JobState.RUNNING and row.started_at is None:
        row.started_at = now
    if new_state is JobState.QUEUED and old is not JobState.QUEUED:
        row.attempts += 1
        row.placement = None
        row.started_at = None
    if new_state.finished:
        row.finished_at = now
    if new_state is not JobState.QUEUED:
        row.not_before = None
    row.state = new_state.value
    row.reason = reason
    session.add(JobEventRow(job_id=row.id, at=now, state=new_state.value, reason=reason))


def _job(row: JobRow) -> Job:
    return Job(
        id=row.id,
        tenant=row.tenant,
        name=row.name,
        spec=JobSpec.model_validate(row.job),
        priority=row.priority,
        state=JobState(row.state),
        reason=row.reason,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        attempts=row.attempts,
        exit_code=row.exit_code,
        placement=row.placement,
        actor=row.actor,
        cancel_requested=row.cancel_requested,
        preempted_for=row.preempted_for,
        failures=row.failures or 0,
        not_before=row.not_before,
    )


def _shown(job: Job) -> dict[str, Any]:
    """What the audit log keeps of a job: its state and what the runner recorded, not the file
    (its env may hold values the tenant would not want in a log others read)."""
    return {
        "name": job.name,
        "state": job.state.value,
        "reason": job.reason,
        "priority": job.priority,
        "attempts": job.attempts,
        "failures": job.failures,
        "exit_code": job.exit_code,
        "cancel_requested": job.cancel_requested,
    }
