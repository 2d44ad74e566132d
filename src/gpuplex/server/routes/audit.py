"""The audit log and recent events (audit entries and the host runtimes' preemptions, restarts
and watchdog stops, as the hosts reported them to the store), newest first. Tenant-scoped callers
see only entries about their tenant."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from gpuplex.core.access import Permission
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Audit, Current, RuntimeEvents
from gpuplex.server.pages import Cursor, Limit, Page, decode_cursor, encode_cursor
from gpuplex.server.problems import ERROR_RESPONSES, PRINTABLE
from gpuplex.server.routes.tenants import redact_tenants
from gpuplex.store import AuditEntry

router = APIRouter(tags=["audit"], responses=ERROR_RESPONSES)


class AuditReply(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    tenant: str | None
    detail: dict[str, Any]
    before: Any
    after: Any
    entry_hash: str


class EventReply(BaseModel):
    at: datetime
    source: str  # audit | host
    kind: str
    target: str
    tenant: str | None
    message: str


def audit_reply(entry: AuditEntry) -> AuditReply:
    return AuditReply(
        id=entry.id,
        at=entry.at,
        actor=entry.actor,
        action=entry.action,
        target=entry.target,
        tenant=entry.tenant,
        detail=entry.detail,
        before=entry.before,
        after=entry.after,
        entry_hash=entry.entry_hash,
    )


@router.get("/audit", response_model=Page[AuditReply])
def list_audit(
    principal: CurrentPrincipal,
    audit: Audit,
    action: Annotated[str | None, Query(max_length=64, pattern=PRINTABLE)] = None,
    tenant: Annotated[str | None, Query(max_length=253)] = None,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[AuditReply]:
    """Newest first. A tenant-scoped caller gets their own tenant's entries whatever `tenant` says
    (another tenant: 404)."""
    if not principal.is_platform:
        require(principal, Permission.AUDIT_READ, tenant or principal.tenant)
        tenant = principal.tenant
    else:
        require(principal, Permission.AUDIT_READ)
    before_id = decode_cursor(cursor) or None
    entries = audit.entries(action=action, tenant=tenant, before_id=before_id, limit=limit + 1)
    newest_first = sorted(entries, key=lambda e: e.id, reverse=True)
    page = newest_first[:limit]
    more = len(newest_first) > limit
    return Page[AuditReply](
        items=[audit_reply(e) for e in page],
        next_cursor=encode_cursor(page[-1].id) if more and page else None,
    )


@router.get("/events", response_model=list[EventReply])
def recent_events(
    principal: CurrentPrincipal,
    audit: Audit,
    current: Current,
    host_events: RuntimeEvents,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> list[EventReply]:
    """The newest events of both kinds, merged by time."""
    require(principal, Permission.EVENT_READ, principal.tenant)
    tenant = None if principal.is_platform else principal.tenant
    events = [
        EventReply(
            at=e.at,
            source="audit",
            kind=e.action,
            target=e.target,
            tenant=e.tenant,
            message=f"{e.actor}: {e.action} {e.target}",
        )
        for e in audit.entries(tenant=tenant, limit=limit)
    ]
    applied = current.get()
    names = applied.tenant_names if applied is not None else []
    # as the hosts reported them to the store: a host's state folder may be on another machine
    for event in host_events.recent(limit, tenant=tenant):
        events.append(
            EventReply(
                at=event.at,
                source="host",
                kind=event.kind,
                target=event.target,
                tenant=event.tenant,
                # a preemption names who took the room: not the caller's to know
                message=redact_tenants(event.message, principal, names),
            )
        )
    events.sort(key=lambda e: e.at, reverse=True)
    return events[:limit]
