"""Each run of a job on a GPU (`job_runs`): what it held, from when until when. Metering bills job
GPU time from these rows (gpuplex.core.meter.jobs), as it bills replicas from the applied plans.

A run opens when the job enters `starting` with a placement and closes when the job leaves the
states that hold capacity (back to `queued`, or finished); both happen inside the job's own
transition (gpuplex.store.jobs), so a job has at most one open run and every run of a job that
held capacity is closed by the step that freed it. Each run is one attempt. When its host saw its
process start and end, the run is moved to those moments (`started_run`, `close_run`'s `at`):
what is billed is the time the process ran, not the time until the runner noticed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Select, or_, select
from sqlalchemy.orm import Session

from gpuplex.core.jobs.states import JobState
from gpuplex.core.meter.allocation import placement_gpu_share
from gpuplex.core.meter.jobs import JobRunInterval
from gpuplex.core.plan.model import Placement
from gpuplex.errors import JobStateError
from gpuplex.store.tables import JobRow, JobRunRow

#: Characters job_runs.gpu_share holds (the Decimal's exact text).
_SHARE_CHARS = 32


@dataclass(frozen=True, slots=True)
class JobRun:
    """One stored run of a job, with the job's name (for statements)."""

    id: int
    job_id: str
    name: str | None
    tenant: str
    attempt: int  # the job's attempts when it started: 0 for its first run
    node: str
    placement: dict[str, Any]  # gpuplex.core.plan.model.Placement as JSON
    gpu_share: Decimal  # GPUs it held: 1 per whole GPU, compute_percent / 100 for a share
    started_at: datetime  # timezone-aware UTC
    ended_at: datetime | None  # None: it still holds its capacity
    end_state: JobState | None  # the state that ended it
    exit_code: int | None = None  # its process's exit status (128 + N for signal N)
    end_reason: str | None = None  # why it ended, as the job's event says

    @property
    def seconds(self) -> float | None:
        """How long it ran; None while it runs."""
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def interval(self) -> JobRunInterval:
        """The run as metering reads it."""
        return JobRunInterval.of_placement(
            self.job_id,
            self.tenant,
            Placement.model_validate(self.placement),
            self.gpu_share,
            self.started_at,
            self.ended_at,
        )


def open_run(
    session: Session,
    job: JobRow,
    placement: dict[str, Any],
    gpu_share: Decimal | None,
    now: datetime,
) -> None:
    """Open a run of `job` at `now` on `placement` (closing one left open, so there is never more
    than one). `gpu_share` None: the placement's compute_percent / 100. A placement that is not a
    Placement, or a share that would bill nothing, is a JobStateError; nothing is stored then."""
    try:
        placed = Placement.model_validate(placement)
    except ValidationError as error:
        raise JobStateError(
            f"job {job.id}: its placement is not a plan placement ({error.error_count()} "
            "problems): pass Placement.model_dump(mode='json')"
        ) from None
    share = placement_gpu_share(placed) if gpu_share is None else gpu_share
    if not share.is_finite() or share <= 0:
        raise JobStateError(
            f"job {job.id}: a GPU share of {share} would bill nothing; pass gpu_share "
            "(a time-slice share without compute_percent: core.meter.gpu_share with the live plan)"
        )
    if len(str(share)) > _SHARE_CHARS:
        raise JobStateError(f"job {job.id}: gpu_share {share} has more digits than the store keeps")
    close_run(session, job.id, JobState.STARTING, now)
    session.add(
        JobRunRow(
            job_id=job.id,
            tenant=job.tenant,
            attempt=job.attempts,
            node=placed.node,
            placement=placement,
            gpu_share=str(share),
            started_at=now,
        )
    )


def close_run(
    session: Session,
    job_id: str,
    end_state: JobState,
    at: datetime,
    exit_code: int | None = None,
    reason: str | None = None,
) -> None:
    """End the job's open run, if it has one, at `at` (never before it started) because it
    became `end_state` (`reason`), its process having exited with `exit_code`."""
    for run in session.scalars(_open(job_id)):
        run.ended_at = max(at, run.started_at)
        run.end_state = end_state.value
        run.exit_code = exit_code
        run.end_reason = reason


def started_run(session: Session, job_id: str, at: datetime) -> datetime:
    """Move the start of the job's open run to `at`, when its process started (never before it
    was placed): the time from placement to start is not billed. Returns the run's start (`at`
    itself when the job has no open run)."""
    for run in session.scalars(_open(job_id)):
        run.started_at = max(at, run.started_at)
        return run.started_at
    return at


def _open(job_id: str) -> Select[JobRunRow]:
    return select(JobRunRow).where(JobRunRow.job_id == job_id, JobRunRow.ended_at.is_(None))


def overlapping(
    start: datetime, end: datetime, tenant: str | None
) -> Select[JobRunRow, str | None]:
    """Runs that held capacity at some moment of [start, end), open ones included, oldest first."""
    query = _with_names().where(
        JobRunRow.started_at < end,
        or_(JobRunRow.ended_at.is_(None), JobRunRow.ended_at > start),
    )
    if tenant is not None:
        query = query.where(JobRunRow.tenant == tenant)
    return query


def of_job(job_id: str) -> Select[JobRunRow, str | None]:
    """One job's runs, oldest first."""
    return _with_names().where(JobRunRow.job_id == job_id)


def _with_names() -> Select[JobRunRow, str | None]:
    return (
        select(JobRunRow, JobRow.name)
        .outerjoin(JobRow, JobRow.id == JobRunRow.job_id)
        .order_by(JobRunRow.started_at, JobRunRow.id)
    )


def job_runs(session: Session, query: Select[JobRunRow, str | None]) -> list[JobRun]:
    return [_run(row, name) for row, name in session.execute(query)]


def _run(row: JobRunRow, name: str | None) -> JobRun:
    return JobRun(
        id=row.id,
        job_id=row.job_id,
        name=name,
        tenant=row.tenant,
        attempt=row.attempt,
        node=row.node,
        placement=row.placement,
        gpu_share=Decimal(row.gpu_share),
        started_at=row.started_at,
        ended_at=row.ended_at,
        end_state=None if row.end_state is None else JobState(row.end_state),
        exit_code=row.exit_code,
        end_reason=row.end_reason,
    )
