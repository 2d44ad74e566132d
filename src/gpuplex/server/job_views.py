"""What the jobs API answers: a job, its events, why a queued job waits now, and its logs.

Why a job waits is worked out on each request as the job runner's next step, read-only
(`server.job_runner.next_step`: the admission rules, then placement, over every tenant's jobs and
what holds capacity now), so `job show` and the dashboard say exactly what the runner will do. A
reason that names another tenant's job, another tenant or a queue off the caller's path is shown
to a tenant-scoped caller without that id or name (`gpuplex.server.reason_filter`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpuplex.core.access import Principal
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import HOLDING_STATES, JobState
from gpuplex.core.queues.tree import queue_tree
from gpuplex.host.logs import log_files
from gpuplex.host.state import StateDir
from gpuplex.revision import AppliedRevision
from gpuplex.server.context import ServerContext
from gpuplex.server.job_runner import next_step
from gpuplex.server.reason_filter import ReasonFilter
from gpuplex.store.job_reports import JobReports
from gpuplex.store.jobs import Job, JobEvent

NO_SPEC = "no spec is applied: no job can start"
NO_QUEUES = "the applied spec has no queues: no job can start"
ADMITTED = "admitted by the queues: it starts when the job runner picks it up"
NOT_LOOKED_AT = "not looked at this round: an earlier job of its tenant waits"


class JobReply(BaseModel):
    id: str
    tenant: str
    name: str | None
    state: JobState
    reason: str  # the last reason the job's state changed for
    priority: int
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int  # times it went back to the queue after preemption
    exit_code: int | None
    placement: dict[str, Any] | None
    submitted_by: str
    cancel_requested: bool
    job: dict[str, Any]  # the job file, as validated


class JobEventReply(BaseModel):
    at: datetime
    state: JobState
    reason: str


class JobDetailReply(JobReply):
    events: list[JobEventReply]
    #: for a queued job: why it waits now, by the queues' rules; None for any other state
    waiting_reason: str | None


class JobLogLine(BaseModel):
    stream: str  # stdout or stderr
    text: str


class JobLogsReply(BaseModel):
    id: str
    lines: list[JobLogLine]  # the last lines of stdout, then of stderr
    note: str | None  # why there are none, when there are none


def job_reply(job: Job) -> JobReply:
    return JobReply(**_fields(job))


def job_detail(
    ctx: ServerContext, principal: Principal, job: Job, events: list[JobEvent]
) -> JobDetailReply:
    waiting = why_waiting(ctx, principal, job) if job.state is JobState.QUEUED else None
    return JobDetailReply(
        **_fields(job),
        events=[JobEventReply(at=e.at, state=e.state, reason=e.reason) for e in events],
        waiting_reason=waiting,
    )


@dataclass(frozen=True, slots=True)
class WaitingNow:
    """Why each queued job waits now (`reasons`, by job id), with the jobs the rules looked at:
    the queued ones and those that hold capacity."""

    reasons: Mapping[str, str]
    queued: list[Job]
    holding: list[Job]

    def reason(self, job_id: str) -> str:
        return self.reasons.get(job_id, NOT_LOOKED_AT)


def waiting_now(ctx: ServerContext, applied: AppliedRevision | None) -> WaitingNow:
    """The job runner's next step, read-only, under the `applied` revision: why each queued job
    waits, or where it is about to start."""
    queued = ctx.jobs.list(states=[JobState.QUEUED])
    holding = ctx.jobs.list(states=HOLDING_STATES)
    if applied is None:
        return WaitingNow(dict.fromkeys((j.id for j in queued), NO_SPEC), queued, holding)
    if not applied.spec.queues.enabled:
        return WaitingNow(dict.fromkeys((j.id for j in queued), NO_QUEUES), queued, holding)
    upcoming = next_step(ctx, JobReports(ctx.engine))
    reasons = dict(upcoming.waiting) if upcoming is not None else {}
    for change in upcoming.transitions if upcoming is not None else ():
        if change.state is JobState.STARTING:
            reasons[change.job_id] = f"{ADMITTED} ({change.reason})"
    return WaitingNow(reasons, queued, holding)


def why_waiting(ctx: ServerContext, principal: Principal, job: Job) -> str:
    """Why the queued `job` waits now, in plain words, as `principal` may read it."""
    applied = ctx.current.get()
    now = waiting_now(ctx, applied)
    if applied is None:
        return now.reason(job.id)
    shown = ReasonFilter.for_caller(
        principal,
        (*now.queued, *now.holding),
        applied.tenant_names,
        queue_tree(applied.spec),
    )
    return shown(now.reason(job.id))


def job_logs(state_dir: Path | None, job: Job, tail: int) -> JobLogsReply:
    """The last `tail` lines of each of the job's log files, where the runner writes them."""
    if state_dir is None:
        return JobLogsReply(
            id=job.id, lines=[], note="this control plane has no host state directory"
        )
    unit = f"{job_workload_name(job.id)}-0"
    lines: list[JobLogLine] = []
    for stream, path in zip(
        ("stdout", "stderr"), log_files(StateDir(state_dir).logs, job.tenant, unit), strict=True
    ):
        lines += [JobLogLine(stream=stream, text=text) for text in _last_lines(path, tail)]
    note = None
    if not lines:
        note = (
            "no output yet: the job has not started"
            if job.state is JobState.QUEUED
            else "the job wrote no output on this host"
        )
    return JobLogsReply(id=job.id, lines=lines, note=note)


def _last_lines(path: Path, tail: int) -> list[str]:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in deque(handle, maxlen=tail)]
    except FileNotFoundError:
        return []


def _fields(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "tenant": job.tenant,
        "name": job.name,
        "state": job.state,
        "reason": job.reason,
        "priority": job.priority,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "attempts": job.attempts,
        "exit_code": job.exit_code,
        "placement": job.placement,
        "submitted_by": job.actor,
        "cancel_requested": job.cancel_requested,
        "job": job.spec.model_dump(mode="json"),
    }
