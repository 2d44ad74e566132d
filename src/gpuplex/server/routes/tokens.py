"""Control-plane tokens for people and automation. A platform admin makes any; a tenant admin makes
tenant-admin or viewer tokens for their own tenant. The secret is in the create reply only."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from gpuplex.core.access import Permission, Principal, Role, Verdict, may_grant
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.context import ServerContext, server_context
from gpuplex.server.pages import Cursor, Limit, Page, page_of
from gpuplex.server.problems import ERROR_RESPONSES, PRINTABLE, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.server.times import checked_time
from gpuplex.store.tokens import ApiToken

router = APIRouter(tags=["tokens"], responses=ERROR_RESPONSES)
Context = Annotated[ServerContext, Depends(server_context)]


class TokenCreateRequest(RequestModel):
    name: str = Field(
        min_length=1, max_length=200, pattern=PRINTABLE, description="Who or what uses it."
    )
    role: Role
    tenant: str | None = Field(default=None, description="Required for the tenant roles.")
    expires_at: datetime | None = None


class TokenReply(BaseModel):
    prefix: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None


class TokenCreatedReply(TokenReply):
    token: str = Field(description="The whole token. Shown in this reply only; store it now.")


def token_reply(token: ApiToken) -> TokenReply:
    return TokenReply(
        prefix=token.prefix,
        name=token.name,
        role=Role(token.role),
        tenant=token.tenant,
        created_at=token.created_at,
        created_by=token.created_by,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
    )


def _visible(principal: Principal, ctx: ServerContext) -> list[ApiToken]:
    if principal.is_platform:
        return ctx.tokens.list()
    return ctx.tokens.list(tenant=principal.tenant)


@router.get("/tokens", response_model=Page[TokenReply])
def list_tokens(
    principal: CurrentPrincipal, ctx: Context, limit: Limit = 100, cursor: Cursor = None
) -> Page[TokenReply]:
    """Platform admins see every token; tenant admins their tenant's."""
    require(principal, Permission.TOKEN_READ, principal.tenant)
    return page_of([token_reply(t) for t in _visible(principal, ctx)], limit, cursor)


@router.post("/tokens", response_model=TokenCreatedReply, status_code=201)
def create_token(
    body: TokenCreateRequest, principal: CurrentPrincipal, ctx: Context
) -> TokenCreatedReply:
    if (body.role is Role.PLATFORM_ADMIN) != (body.tenant is None):
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            "tenant: a platform-admin token has no tenant; a tenant role needs one",
            field="tenant",
        )
    verdict = may_grant(principal, body.role, body.tenant)
    if verdict is Verdict.FORBIDDEN:
        raise ApiProblem(
            ErrorCode.FORBIDDEN, f"the {principal.role} role may not grant {body.role}"
        )
    if body.tenant is not None:
        require(principal, Permission.TOKEN_WRITE, body.tenant)
        applied_tenant(ctx, body.tenant)
    now = ctx.now()
    if body.expires_at is not None and checked_time(body.expires_at, "expires_at") <= now:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            "expires_at: give a future time with a timezone",
            field="expires_at",
        )
    secret, token = ctx.tokens.create(
        name=body.name,
        role=body.role.value,
        tenant=body.tenant,
        expires_at=body.expires_at,
        now=now,
        actor=principal.actor,
    )
    return TokenCreatedReply(**token_reply(token).model_dump(), token=secret)


@router.delete("/tokens/{prefix}", response_model=TokenReply)
def revoke_token(prefix: str, principal: CurrentPrincipal, ctx: Context) -> TokenReply:
    require(principal, Permission.TOKEN_WRITE, principal.tenant)
    if not any(t.prefix == prefix for t in _visible(principal, ctx)):
        raise ApiProblem(ErrorCode.NOT_FOUND, f"no token {prefix!r}")
    return token_reply(ctx.tokens.revoke(prefix, ctx.now(), principal.actor))


class WhoAmIReply(BaseModel):
    name: str
    role: Role
    tenant: str | None


@router.get("/whoami", response_model=WhoAmIReply)
def whoami(principal: CurrentPrincipal) -> WhoAmIReply:
    """The caller's token name, role and tenant (the dashboard asks this first)."""
    return WhoAmIReply(name=principal.name, role=principal.role, tenant=principal.tenant)
