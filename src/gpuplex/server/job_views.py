"""What the jobs API answers: a job, its events, why a queued job waits now, and its logs.

Why a job waits is worked out on each request as the job runner's next step, read-only
(`server.job_runner.next_step`: the admission rules, then placement, over every tenant's jobs and
what holds capacity now), so `job show` and the dashboard say exactly what the runner will do.

What a caller sees depends on who it is (`JobsSeenBy`): a tenant-scoped caller never reads another
tenant's job id or name, nor a queue off its own path, in any reason (why it waits, why its state
changed, its events: a job preempted to reclaim capacity is told so without naming whose; the
words are hidden by `gpuplex.server.reason_filter`); a caller who may not submit the
tenant's jobs (a viewer) sees the names of a job's environment variables but not their values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from gpuplex.core.access import Permission, Principal, Verdict, decide
from gpuplex.core.jobs.states import HOLDING_STATES, JobState
from gpuplex.core.queues.tree import queue_tree
from gpuplex.host.log_tail import MAX_LOG_BYTES
from gpuplex.revision import AppliedRevision
from gpuplex.server.job_runner import JobStepInputs, next_step
from gpuplex.server.reason_filter import OTHER_TENANTS_JOB, ReasonFilter
from gpuplex.store.job_logs import JobLogs
from gpuplex.store.job_runs import JobRun
from gpuplex.store.jobs import JOB_ID_PATTERN, Job, JobEvent

NO_SPEC = "no spec is applied: no job can start"
NO_QUEUES = "the applied spec has no queues: no job can start"
ADMITTED = "admitted by the queues: it starts when the job runner picks it up"
NOT_LOOKED_AT = "not looked at this round: an earlier job of its tenant waits"
#: What a caller who may not submit the tenant's jobs reads for each environment value.
HIDDEN_VALUE = "<hidden>"
LOG_KIB = MAX_LOG_BYTES // 1024  # of each stream, the most its host reports
#: A job id in a reason.
_JOB_ID = re.compile(rf"\b{JOB_ID_PATTERN}\b")


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
    attempts: int  # times it went back to the queue: its current attempt is attempts + 1
    failures: int  # failed attempts that counted against its retries (job.backoff_limit)
    not_before: datetime | None  # a queued retry starts no earlier than this
    exit_code: int | None  # a finished job's: its last attempt's exit status
    placement: dict[str, Any] | None
    submitted_by: str
    cancel_requested: bool
    job: dict[str, Any]  # the job file, as validated
    #: for a queued job, in a list or shown alone: why it waits now, by the queues' rules; None
    #: for any other state (and in the answers to submit and cancel)
    waiting_reason: str | None = None


class JobEventReply(BaseModel):
    at: datetime
    state: JobState
    reason: str


class JobRunReply(BaseModel):
    """One attempt: when its process ran (as its host saw it), where, and how it ended."""

    attempt: int  # 1 for the first
    node: str
    started_at: datetime
    ended_at: datetime | None  # None: it still runs (or holds its GPU)
    end_state: JobState | None  # the state its end moved the job to
    exit_code: int | None
    reason: str | None  # why it ended
    seconds: float | None  # how long it ran: what is billed, times gpu_share
    gpu_share: Decimal
    gpu_seconds: Decimal | None


class JobDetailReply(JobReply):
    events: list[JobEventReply]
    #: each attempt that was placed, oldest first
    runs: list[JobRunReply]


class JobLogLine(BaseModel):
    stream: str  # stdout or stderr
    text: str


class JobLogsReply(BaseModel):
    id: str
    lines: list[JobLogLine]  # the last lines of stdout, then of stderr
    note: str | None  # why there are none, when there are none


@dataclass(frozen=True, slots=True)
class WaitingNow:
    """Why each queued job waits now (`reasons`, by job id), with the jobs the rules looked at:
    the queued ones and those that hold capacity."""

    reasons: Mapping[str, str]
    queued: list[Job]
    holding: list[Job]

    def reason(self, job_id: str) -> str:
        return self.reasons.get(job_id, NOT_LOOKED_AT)


def waiting_now(inputs: JobStepInputs, applied: AppliedRevision | None) -> WaitingNow:
    """The job runner's next step, read-only, under the `applied` revision: why each queued job
    waits, or where it is about to start."""
    queued = inputs.jobs.list(states=[JobState.QUEUED])
    holding = inputs.jobs.list(states=HOLDING_STATES)
    if applied is None:
        return WaitingNow(dict.fromkeys((j.id for j in queued), NO_SPEC), queued, holding)
    if not applied.spec.queues.enabled:
        return WaitingNow(dict.fromkeys((j.id for j in queued), NO_QUEUES), queued, holding)
    upcoming = next_step(inputs)
    reasons = dict(upcoming.waiting) if upcoming is not None else {}
    for change in upcoming.transitions if upcoming is not None else ():
        if change.state is JobState.STARTING:
            reasons[change.job_id] = f"{ADMITTED} ({change.reason})"
    return WaitingNow(reasons, queued, holding)


class JobsSeenBy:
    """Jobs as one caller may see them (see the module docstring)."""

    def __init__(self, inputs: JobStepInputs, principal: Principal) -> None:
        self.inputs = inputs  # the jobs, the applied revision, and the runner's next step
        self.principal = principal
        self._filter: ReasonFilter | None = None  # for the applied spec, made once
        self._waiting: WaitingNow | None = None  # the runner's next step, worked out once

    def reply(self, job: Job) -> JobReply:
        return JobReply(**self._fields(job))

    def replies(self, jobs: list[Job]) -> list[JobReply]:
        """The jobs, each queued one with why it waits now (one round for them all)."""
        return [
            JobReply(
                **self._fields(job),
                waiting_reason=self.why_waiting(job) if job.state is JobState.QUEUED else None,
            )
            for job in jobs
        ]

    def detail(self, job: Job, events: list[JobEvent]) -> JobDetailReply:
        waiting = self.why_waiting(job) if job.state is JobState.QUEUED else None
        return JobDetailReply(
            **self._fields(job),
            events=[
                JobEventReply(at=e.at, state=e.state, reason=self.words(e.reason, job.tenant))
                for e in events
            ],
            waiting_reason=waiting,
            runs=[self._run(run, job.tenant) for run in self.inputs.jobs.runs_of(job.id)],
        )

    def _run(self, run: JobRun, tenant: str) -> JobRunReply:
        seconds = run.seconds
        return JobRunReply(
            attempt=run.attempt + 1,
            node=run.node,
            started_at=run.started_at,
            ended_at=run.ended_at,
            end_state=run.end_state,
            exit_code=run.exit_code,
            reason=self.words(run.end_reason, tenant) if run.end_reason is not None else None,
            seconds=seconds,
            gpu_share=run.gpu_share,
            gpu_seconds=None if seconds is None else Decimal(str(seconds)) * run.gpu_share,
        )

    def why_waiting(self, job: Job) -> str:
        """Why the queued `job` waits now, in plain words (the runner's next step is worked out
        on the first call, and reused for the other jobs of the same answer)."""
        if self._waiting is None:
            self._waiting = waiting_now(self.inputs, self.inputs.current.get())
        return self.words(self._waiting.reason(job.id), job.tenant)

    def words(self, text: str, tenant: str) -> str:
        """`text` (about a job of `tenant`) without another tenant's job ids and names, or the
        queues off the caller's path, for a tenant-scoped caller; as it is for the platform."""
        if self.principal.is_platform:
            return text
        ids = set(_JOB_ID.findall(text))
        if ids:
            owners = self.inputs.jobs.tenants_of(ids)
            for job_id in ids:
                if owners.get(job_id) != tenant:
                    text = re.sub(rf"\b{job_id}\b", OTHER_TENANTS_JOB, text)
        if self._filter is None:
            applied = self.inputs.current.get()
            self._filter = (
                ReasonFilter.for_caller(
                    self.principal, (), applied.tenant_names, queue_tree(applied.spec)
                )
                if applied is not None
                else ReasonFilter()
            )
        return self._filter(text)

    def _fields(self, job: Job) -> dict[str, Any]:
        spec = job.spec.model_dump(mode="json")
        may_write = decide(self.principal, Permission.JOB_WRITE, job.tenant) is Verdict.ALLOW
        if not may_write:
            spec["env"] = dict.fromkeys(spec["env"], HIDDEN_VALUE)
        return {
            "id": job.id,
            "tenant": job.tenant,
            "name": job.name,
            "state": job.state,
            "reason": self.words(job.reason, job.tenant),
            "priority": job.priority,
            "submitted_at": job.submitted_at,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "attempts": job.attempts,
            "failures": job.failures,
            "not_before": job.not_before,
            "exit_code": job.exit_code,
            "placement": job.placement,
            "submitted_by": job.actor,
            "cancel_requested": job.cancel_requested,
            "job": spec,
        }


def job_logs(logs: JobLogs, job: Job, tail: int) -> JobLogsReply:
    """The last `tail` lines of each of the job's streams, as the host running it last reported
    them to the store (it reads its files bounded and never through a link:
    `gpuplex.host.log_tail`); nothing here reads a host's files."""
    reported = logs.of(job.id)
    lines: list[JobLogLine] = []
    notes: list[str] = []
    if reported is not None:
        for name, stream in (("stdout", reported.stdout), ("stderr", reported.stderr)):
            kept = stream.lines[-tail:]
            lines += [JobLogLine(stream=name, text=text) for text in kept]
            if stream.refused is not None and stream.refused not in notes:
                notes.append(stream.refused)
            elif stream.truncated:
                notes.append(f"{name}: only its last {LOG_KIB} KiB are kept")
    if not lines and not notes:
        notes.append(
            "no output yet: the job has not started"
            if job.state is JobState.QUEUED
            else "its host has reported no output of the job yet"
        )
    return JobLogsReply(id=job.id, lines=lines, note="; ".join(notes) or None)
