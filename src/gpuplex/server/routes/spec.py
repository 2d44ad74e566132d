"""The spec: read the applied one, preview the plan a new one would get, apply it.

Apply is optimistic: the caller names the revision its preview was computed from, and the store
refuses (409 `spec_stale`) when another apply landed in between, so nobody overwrites a change
they never saw.
"""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gpuplex.core.access import Permission
from gpuplex.core.plan import Plan, Summary
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Current, History
from gpuplex.server.problems import ERROR_RESPONSES, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.spec_apply import apply, preview

router = APIRouter(tags=["spec"], responses=ERROR_RESPONSES)
MAX_SPEC_CHARS = 1_000_000


class SpecRequest(RequestModel):
    spec_yaml: str = Field(max_length=MAX_SPEC_CHARS, description="A whole gpuplex.yaml.")


class ApplyRequest(SpecRequest):
    base_revision: int = Field(
        ge=0, description="The revision the preview was computed from (0 before the first)."
    )


class PreviewReply(BaseModel):
    base_revision: int
    spec_sha256: str
    plan: Plan


class RevisionReply(BaseModel):
    revision: int
    created_at: datetime
    actor: str
    spec_sha256: str
    summary: Summary


class AppliedReply(RevisionReply):
    spec_yaml: str
    plan: Plan


@router.get("/spec", response_model=AppliedReply)
def get_spec(principal: CurrentPrincipal, current: Current) -> AppliedReply:
    """The applied spec and its plan (platform admins: it names every tenant)."""
    require(principal, Permission.FLEET_READ)
    applied = current.get()
    if applied is None:
        raise ApiProblem(ErrorCode.NOT_FOUND, "no spec applied yet; POST /api/v1/spec/apply")
    return AppliedReply(
        revision=applied.revision,
        created_at=applied.created_at,
        actor=applied.actor,
        spec_sha256=applied.spec_sha256,
        summary=applied.plan.summary,
        spec_yaml=applied.spec_yaml,
        plan=applied.plan,
    )


@router.post("/spec/preview", response_model=PreviewReply)
def preview_spec(body: SpecRequest, principal: CurrentPrincipal, current: Current) -> PreviewReply:
    """The plan this spec would get, re-planned against the applied plan (what stays, moves, or
    is preempted). Changes nothing."""
    require(principal, Permission.SPEC_WRITE)
    planned = preview(current, body.spec_yaml)
    return PreviewReply(
        base_revision=planned.base_revision, spec_sha256=planned.spec_sha256, plan=planned.plan
    )


@router.post("/spec/apply", response_model=RevisionReply, status_code=201)
def apply_spec(body: ApplyRequest, principal: CurrentPrincipal, history: History) -> RevisionReply:
    """Store the spec and its plan as the next revision; 409 `spec_stale` when `base_revision`
    is not the applied revision."""
    require(principal, Permission.SPEC_WRITE)
    revision, plan = apply(history, body.spec_yaml, body.base_revision, principal.actor)
    return RevisionReply(
        revision=revision.revision,
        created_at=revision.created_at,
        actor=revision.actor,
        spec_sha256=revision.spec_sha256,
        summary=plan.summary,
    )
