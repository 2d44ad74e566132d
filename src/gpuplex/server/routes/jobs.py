"""A tenant's jobs: submit one (its job file's fields as the body), list them, show one with its
events and why it waits, cancel one, read its logs.

A job is checked against the applied spec when it is submitted (`check_job`): a problem is 422
`job_invalid` with the field at fault; a spec without `queues:` cannot take jobs (409
`queues_not_configured`); a tenant with as many jobs not finished as its queue allows
(`max_active_jobs`), or that submitted as many in the last minute (`max_submits_per_minute`), gets
429 `too_many_jobs`. Starting jobs is the job runner's work; until it runs, jobs stay queued.

A job id that is not the shape of one, another tenant's job and one that does not exist are all
the same 404: the answer never tells whether an id is taken.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Query

from gpuplex.core.access import Permission, Principal
from gpuplex.core.jobs.states import JobState
from gpuplex.core.spec.fields import DnsLabel
from gpuplex.core.spec.jobs import JobSpec, check_job
from gpuplex.errors import ErrorCode, JobFileError, JobStateError, SpecProblem, TooManyJobsError
from gpuplex.revision import AppliedRevisions
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Current, JobOutput, Jobs, JobSteps, TheClock
from gpuplex.server.job_views import JobDetailReply, JobLogsReply, JobReply, JobsSeenBy, job_logs
from gpuplex.server.pages import Cursor, Limit, Page, decode_cursor, encode_cursor
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.store.jobs import Job, JobRepository

router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)
#: The shape of a job id (`gpuplex.store.jobs.new_job_id` makes `j` + 8 hex digits).
JOB_ID_SHAPE = re.compile(r"[a-z0-9]{1,16}")
MAX_TAIL = 10_000


class JobSubmitRequest(RequestModel, JobSpec):
    """The job file's fields; `tenant` may be left out (the path names it) or must match."""

    tenant: DnsLabel | None = None  # type: ignore[assignment]


@router.post("/tenants/{tenant}/jobs", response_model=JobReply, status_code=201)
def submit_job(
    tenant: str,
    body: JobSubmitRequest,
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    steps: JobSteps,
    clock: TheClock,
) -> JobReply:
    """Queue a job of the tenant. It waits for the queues to admit it."""
    require(principal, Permission.JOB_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant, principal)
    if not applied.spec.queues.enabled:
        raise ApiProblem(
            ErrorCode.NO_QUEUES,
            "the applied spec has no queues: section, so it takes no jobs: add queues "
            "(docs/configuration.md#queues) and apply it",
        )
    if body.tenant is not None and body.tenant != tenant:
        problem = SpecProblem(("tenant",), f"the job names tenant {body.tenant!r}, not {tenant!r}")
        raise JobFileError("job", [problem])
    fields = {name: getattr(body, name) for name in JobSpec.model_fields if name != "tenant"}
    job = JobSpec(tenant=tenant, **fields)
    problems = list(check_job(applied.spec, job))
    if problems:
        raise JobFileError("job", problems)
    caps = applied.spec.queues.job_caps_of(tenant)
    try:
        submitted = jobs.submit(job, now=clock.utc_now(), actor=principal.actor, caps=caps)
    except TooManyJobsError as error:
        raise ApiProblem(
            ErrorCode.TOO_MANY_JOBS,
            error.message,
            field="tenant",
            max_active_jobs=caps.max_active,
            max_submits_per_minute=caps.max_submits_per_minute,
        ) from None
    return JobsSeenBy(steps, principal).reply(submitted)


@router.get("/tenants/{tenant}/jobs", response_model=Page[JobReply])
def list_jobs(
    tenant: str,
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    steps: JobSteps,
    state: Annotated[list[JobState] | None, Query(description="Only jobs in these states.")] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[JobReply]:
    """The tenant's jobs, newest first (only the page is read from the store); each queued one
    with why it waits now (one read-only round of the job runner for the whole page)."""
    require(principal, Permission.JOB_READ, tenant)
    applied_tenant(current, tenant, principal)
    start = decode_cursor(cursor)
    found = jobs.list(tenant, state or (), limit=limit + 1, offset=start)
    more = len(found) > limit
    return Page[JobReply](
        items=JobsSeenBy(steps, principal).replies(found[:limit]),
        next_cursor=encode_cursor(start + limit) if more else None,
    )


@router.get("/tenants/{tenant}/jobs/{job_id}", response_model=JobDetailReply)
def show_job(
    tenant: str,
    job_id: str,
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    steps: JobSteps,
) -> JobDetailReply:
    """The job, its events, and for a queued job why it waits now."""
    require(principal, Permission.JOB_READ, tenant)
    job = _job_of(jobs, current, tenant, job_id, principal)
    return JobsSeenBy(steps, principal).detail(job, jobs.events(job.id))


@router.get("/jobs/{job_id}", response_model=JobDetailReply)
def show_job_by_id(
    job_id: str, principal: CurrentPrincipal, jobs: Jobs, steps: JobSteps
) -> JobDetailReply:
    """A job found by its id alone, as `GET /tenants/{tenant}/jobs/{job_id}` answers: any
    tenant's for a platform admin; for a tenant's caller, only its own tenant's (another
    tenant's job is the same 404 as an id that does not exist)."""
    own = None if principal.is_platform else principal.tenant
    if own is not None:
        require(principal, Permission.JOB_READ, own)
    job = jobs.get(job_id, own) if JOB_ID_SHAPE.fullmatch(job_id) else None
    if job is None:
        whose = "no job" if own is None else f"tenant {own!r} has no job"
        raise ApiProblem(
            ErrorCode.NOT_FOUND,
            f"{whose} with that id: `gpuplex job list TENANT` shows a tenant's jobs",
            field="job_id",
        )
    require(principal, Permission.JOB_READ, job.tenant)
    return JobsSeenBy(steps, principal).detail(job, jobs.events(job.id))


@router.post("/tenants/{tenant}/jobs/{job_id}/cancel", response_model=JobReply)
def cancel_job(
    tenant: str,
    job_id: str,
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    steps: JobSteps,
    clock: TheClock,
) -> JobReply:
    """Cancel the job: a queued job at once; a starting or running one is stopped by the runner
    (`cancel_requested`). A finished job: 409 `job_state_conflict`."""
    require(principal, Permission.JOB_WRITE, tenant)
    _job_of(jobs, current, tenant, job_id, principal)
    try:
        job = jobs.request_cancel(job_id, tenant, now=clock.utc_now(), actor=principal.actor)
    except JobStateError as error:
        raise ApiProblem(ErrorCode.JOB_STATE, error.message, field="job_id") from None
    return JobsSeenBy(steps, principal).reply(job)


@router.get("/tenants/{tenant}/jobs/{job_id}/logs", response_model=JobLogsReply)
def read_job_logs(
    tenant: str,
    job_id: str,
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    output: JobOutput,
    tail: Annotated[int, Query(ge=1, le=MAX_TAIL, description="Last lines per stream.")] = 200,
) -> JobLogsReply:
    """The last lines the job wrote (stdout, then stderr), as its host last reported them."""
    require(principal, Permission.JOB_READ, tenant)
    return job_logs(output, _job_of(jobs, current, tenant, job_id, principal), tail)


def _job_of(
    jobs: JobRepository,
    current: AppliedRevisions,
    tenant: str,
    job_id: str,
    principal: Principal,
) -> Job:
    """The tenant's job; one 404, with the same words, for an id of another tenant's job, one
    that does not exist and one that is not the shape of an id (not looked up at all). Not
    found in a tenant the applied spec lacks: 404 `no tenant` (with the closest name for a
    platform admin, who may have misspelt it)."""
    job = jobs.get(job_id, tenant) if JOB_ID_SHAPE.fullmatch(job_id) else None
    if job is None:
        applied_tenant(current, tenant, principal)
        shown = job_id if JOB_ID_SHAPE.fullmatch(job_id) else "with that id"
        raise ApiProblem(
            ErrorCode.NOT_FOUND,
            f"tenant {tenant!r} has no job {shown}: `gpuplex job list` shows its jobs",
            field="job_id",
        )
    return job
