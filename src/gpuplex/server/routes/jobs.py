"""A tenant's jobs: submit one (its job file's fields as the body), list them, show one with its
events and why it waits, cancel one, read its logs.

A job is checked against the applied spec when it is submitted (`check_job`): a problem is 422
`job_invalid` with the field at fault; a spec without `queues:` cannot take jobs (409
`queues_not_configured`). Starting jobs is the job runner's work; until it runs, jobs stay queued.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query

from gpuplex.core.access import Permission
from gpuplex.core.jobs.states import JobState
from gpuplex.core.spec.fields import DnsLabel
from gpuplex.core.spec.jobs import JobSpec, check_job
from gpuplex.errors import ErrorCode, JobFileError, JobStateError, SpecProblem
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.context import ServerContext, server_context
from gpuplex.server.job_views import (
    JobDetailReply,
    JobLogsReply,
    JobReply,
    job_detail,
    job_logs,
    job_reply,
)
from gpuplex.server.pages import Cursor, Limit, Page, page_of
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.store.jobs import Job

router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)
Context = Annotated[ServerContext, Depends(server_context)]
JobId = Annotated[str, Path(min_length=1, max_length=16, pattern=r"^[a-z0-9]+$")]
MAX_TAIL = 10_000


class JobSubmitRequest(RequestModel, JobSpec):
    """The job file's fields; `tenant` may be left out (the path names it) or must match."""

    tenant: DnsLabel | None = None  # type: ignore[assignment]


@router.post("/tenants/{tenant}/jobs", response_model=JobReply, status_code=201)
def submit_job(
    tenant: str, body: JobSubmitRequest, principal: CurrentPrincipal, ctx: Context
) -> JobReply:
    """Queue a job of the tenant. It waits for the queues to admit it."""
    require(principal, Permission.JOB_WRITE, tenant)
    applied, _ = applied_tenant(ctx, tenant)
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
    return job_reply(ctx.jobs.submit(job, now=ctx.now(), actor=principal.actor))


@router.get("/tenants/{tenant}/jobs", response_model=Page[JobReply])
def list_jobs(
    tenant: str,
    principal: CurrentPrincipal,
    ctx: Context,
    state: Annotated[list[JobState] | None, Query(description="Only jobs in these states.")] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[JobReply]:
    """The tenant's jobs, newest first."""
    require(principal, Permission.JOB_READ, tenant)
    applied_tenant(ctx, tenant)
    jobs = ctx.jobs.list(tenant, state or ())
    return page_of([job_reply(j) for j in jobs], limit, cursor)


@router.get("/tenants/{tenant}/jobs/{job_id}", response_model=JobDetailReply)
def show_job(
    tenant: str, job_id: JobId, principal: CurrentPrincipal, ctx: Context
) -> JobDetailReply:
    """The job, its events, and for a queued job why it waits now."""
    require(principal, Permission.JOB_READ, tenant)
    job = _job_of(ctx, tenant, job_id)
    return job_detail(ctx, principal, job, ctx.jobs.events(job.id))


@router.post("/tenants/{tenant}/jobs/{job_id}/cancel", response_model=JobReply)
def cancel_job(tenant: str, job_id: JobId, principal: CurrentPrincipal, ctx: Context) -> JobReply:
    """Cancel the job: a queued job at once; a starting or running one is stopped by the runner
    (`cancel_requested`). A finished job: 409 `job_state_conflict`."""
    require(principal, Permission.JOB_WRITE, tenant)
    _job_of(ctx, tenant, job_id)
    try:
        job = ctx.jobs.request_cancel(job_id, tenant, now=ctx.now(), actor=principal.actor)
    except JobStateError as error:
        raise ApiProblem(ErrorCode.JOB_STATE, error.message, field="job_id") from None
    return job_reply(job)


@router.get("/tenants/{tenant}/jobs/{job_id}/logs", response_model=JobLogsReply)
def read_job_logs(
    tenant: str,
    job_id: JobId,
    principal: CurrentPrincipal,
    ctx: Context,
    tail: Annotated[int, Query(ge=1, le=MAX_TAIL, description="Last lines per stream.")] = 200,
) -> JobLogsReply:
    """The last lines the job wrote on this host (stdout, then stderr)."""
    require(principal, Permission.JOB_READ, tenant)
    return job_logs(ctx.state_dir, _job_of(ctx, tenant, job_id), tail)


def _job_of(ctx: ServerContext, tenant: str, job_id: str) -> Job:
    job = ctx.jobs.get(job_id, tenant)
    if job is None:
        raise ApiProblem(
            ErrorCode.NOT_FOUND, f"tenant {tenant!r} has no job {job_id!r}", field="job_id"
        )
    return job
