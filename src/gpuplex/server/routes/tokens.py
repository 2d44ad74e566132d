"""Control-plane tokens for people and automation. A platform admin makes any; a tenant admin makes
tenant-admin or viewer tokens for their own tenant. The secret is in the create reply only. A token
records who made it (`made_by`); one a person's chain made is suspended while that person could
not make it (store/credential_grants.py), and listed so."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gpuplex.core.access import Permission, Principal, Role, Verdict, may_grant
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.credential_grants import credential_maker
from gpuplex.server.dependencies import Current, People, TheClock, Tokens
from gpuplex.server.pages import Cursor, Limit, Page, page_of
from gpuplex.server.problems import ERROR_RESPONSES, PRINTABLE, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.server.times import checked_time
from gpuplex.store.credentials import CredentialMaker
from gpuplex.store.tokens import ApiToken, TokenRepository, TokenState

router = APIRouter(tags=["tokens"], responses=ERROR_RESPONSES)


class TokenCreateRequest(RequestModel):
    name: str = Field(
        min_length=1, max_length=200, pattern=PRINTABLE, description="Who or what uses it."
    )
    role: Role
    tenant: str | None = Field(default=None, description="Required for the tenant roles.")
    expires_at: datetime | None = None


class GrantReply(BaseModel):
    role: Role
    tenant: str | None = Field(description="None: the platform.")
    groups: list[str] = Field(description="The maker's groups that gave the role.")


class MadeByReply(BaseModel):
    """Who made a credential: the token that made it, and the person at the root of its chain
    with the grant they acted under (a credential made by a person's token follows the person)."""

    token: str | None = Field(description="The prefix of the control-plane token that made it.")
    person: str | None = Field(description="`oidc SUBJECT at ISSUER`: the person at its root.")
    grant: GrantReply | None


def made_by_reply(maker: CredentialMaker | None) -> MadeByReply | None:
    if maker is None:
        return None
    grant = None
    if maker.grant_role is not None:
        grant = GrantReply(
            role=Role(maker.grant_role), tenant=maker.grant_tenant, groups=list(maker.grant_groups)
        )
    return MadeByReply(token=maker.token_prefix, person=maker.person, grant=grant)


class TokenReply(BaseModel):
    prefix: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    suspended_at: datetime | None = Field(
        description="Since when it is refused: its maker no longer holds a role that could make it."
    )
    state: TokenState
    made_by: MadeByReply | None = Field(description="None: made by no person and no token.")


class TokenCreatedReply(TokenReply):
    token: str = Field(description="The whole token. Shown in this reply only; store it now.")


def token_reply(token: ApiToken, now: datetime) -> TokenReply:
    return TokenReply(
        prefix=token.prefix,
        name=token.name,
        role=Role(token.role),
        tenant=token.tenant,
        created_at=token.created_at,
        created_by=token.created_by,
        expires_at=token.expires_at,
        revoked_at=token.revoked_at,
        suspended_at=token.suspended_at,
        state=token.state(now),
        made_by=made_by_reply(token.made_by),
    )


def _visible(principal: Principal, tokens: TokenRepository) -> list[ApiToken]:
    if principal.is_platform:
        return tokens.list()
    return tokens.list(tenant=principal.tenant)


@router.get("/tokens", response_model=Page[TokenReply])
def list_tokens(
    principal: CurrentPrincipal,
    tokens: Tokens,
    clock: TheClock,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[TokenReply]:
    """Platform admins see every token; tenant admins their tenant's."""
    require(principal, Permission.TOKEN_READ, principal.tenant)
    now = clock.utc_now()
    return page_of([token_reply(t, now) for t in _visible(principal, tokens)], limit, cursor)


@router.post("/tokens", response_model=TokenCreatedReply, status_code=201)
def create_token(
    body: TokenCreateRequest,
    principal: CurrentPrincipal,
    current: Current,
    tokens: Tokens,
    people: People,
    clock: TheClock,
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
        applied_tenant(current, body.tenant)
    now = clock.utc_now()
    if body.expires_at is not None and checked_time(body.expires_at, "expires_at") <= now:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            "expires_at: give a future time with a timezone",
            field="expires_at",
        )
    secret, token = tokens.create(
        name=body.name,
        role=body.role.value,
        tenant=body.tenant,
        expires_at=body.expires_at,
        now=now,
        actor=principal.actor,
        made_by=credential_maker(people, current, principal),
    )
    return TokenCreatedReply(**token_reply(token, now).model_dump(), token=secret)


@router.delete("/tokens/{prefix}", response_model=TokenReply)
def revoke_token(
    prefix: str, principal: CurrentPrincipal, tokens: Tokens, clock: TheClock
) -> TokenReply:
    require(principal, Permission.TOKEN_WRITE, principal.tenant)
    if not any(t.prefix == prefix for t in _visible(principal, tokens)):
        raise ApiProblem(ErrorCode.NOT_FOUND, f"no token {prefix!r}")
    now = clock.utc_now()
    return token_reply(tokens.revoke(prefix, now, principal.actor), now)


class WhoAmIReply(BaseModel):
    name: str
    role: Role
    tenant: str | None


@router.get("/whoami", response_model=WhoAmIReply)
def whoami(principal: CurrentPrincipal) -> WhoAmIReply:
    """The caller's token name, role and tenant (the dashboard asks this first)."""
    return WhoAmIReply(name=principal.name, role=principal.role, tenant=principal.tenant)
