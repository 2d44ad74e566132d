"""The queues, for the dashboard: the queue tree of the applied spec with guarantee, limit, use
and borrowing per kind, and the jobs, queued ones with why they wait, the others with where they
run (`gpuplex.server.queue_views`). A tenant-scoped caller sees its own queue and jobs only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from gpuplex.core.access import Permission
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import JobSteps
from gpuplex.server.problems import ERROR_RESPONSES
from gpuplex.server.queue_views import QueuesReply, queues_view

router = APIRouter(tags=["jobs"], responses=ERROR_RESPONSES)
MAX_QUEUED = 1000


@router.get("/queues", response_model=QueuesReply)
def list_queues(
    principal: CurrentPrincipal,
    steps: JobSteps,
    limit: Annotated[
        int, Query(ge=1, le=MAX_QUEUED, description="At most this many queued jobs.")
    ] = 200,
) -> QueuesReply:
    """Every queue the caller may see, parents before children, with what it guarantees, limits,
    uses and borrows per kind; the queued jobs by their place in their tenant's queue, with why
    each waits; and the jobs that hold capacity, with where they run."""
    require(principal, Permission.JOB_READ, principal.tenant)
    return queues_view(steps, principal, limit)
