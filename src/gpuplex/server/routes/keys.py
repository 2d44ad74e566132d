"""A tenant's gateway API keys: create (the secret is in this one reply only), list, revoke. A key
records who made it (`made_by`); one a person's chain made is suspended while that person could not
make it (store/credential_grants.py): the gateway does not serve it, and the list says so."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gpuplex.core.access import Permission
from gpuplex.core.serve.routes import route_table
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.errors import ErrorCode
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.credential_grants import credential_maker
from gpuplex.server.dependencies import Current, Keys, People, TheClock
from gpuplex.server.pages import Cursor, Limit, Page, page_of
from gpuplex.server.problems import ERROR_RESPONSES, PRINTABLE, ApiProblem
from gpuplex.server.request_model import RequestModel
from gpuplex.server.routes.tenants import applied_tenant
from gpuplex.server.routes.tokens import MadeByReply, made_by_reply
from gpuplex.server.times import checked_time
from gpuplex.store import ApiKey
from gpuplex.store.keys import KeyState

router = APIRouter(tags=["keys"], responses=ERROR_RESPONSES)


class KeyCreateRequest(RequestModel, RateLimits):
    """A new key; its own rate limits are `RateLimits`' fields, at the top level of the body."""

    name: str = Field(default="", max_length=200, pattern=PRINTABLE)
    models: list[str] = Field(
        default_factory=list, max_length=100, description="Empty: every model of the tenant."
    )
    expires_at: datetime | None = None

    @property
    def limits(self) -> RateLimits:
        return RateLimits.model_validate(self.model_dump(include=set(RateLimits.model_fields)))


class KeyReply(BaseModel):
    prefix: str
    tenant: str
    name: str
    models: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    suspended_at: datetime | None = Field(
        description="Since when it is refused: its maker no longer holds a role that could make it."
    )
    state: KeyState
    made_by: MadeByReply | None = Field(description="None: made by no person and no token.")


class KeyCreatedReply(KeyReply):
    key: str = Field(description="The whole key. Shown in this reply only; store it now.")


def key_reply(key: ApiKey, now: datetime) -> KeyReply:
    return KeyReply(
        prefix=key.prefix,
        tenant=key.tenant,
        name=key.name,
        models=list(key.models),
        created_at=key.created_at,
        expires_at=key.expires_at,
        revoked_at=key.revoked_at,
        suspended_at=key.suspended_at,
        state=key.state(now),
        made_by=made_by_reply(key.made_by),
    )


@router.get("/tenants/{tenant}/keys", response_model=Page[KeyReply])
def list_keys(
    tenant: str,
    principal: CurrentPrincipal,
    current: Current,
    keys: Keys,
    clock: TheClock,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[KeyReply]:
    require(principal, Permission.KEY_READ, tenant)
    applied_tenant(current, tenant)
    now = clock.utc_now()
    return page_of([key_reply(k, now) for k in keys.list(tenant)], limit, cursor)


@router.post("/tenants/{tenant}/keys", response_model=KeyCreatedReply, status_code=201)
def create_key(
    tenant: str,
    body: KeyCreateRequest,
    principal: CurrentPrincipal,
    current: Current,
    keys: Keys,
    people: People,
    clock: TheClock,
) -> KeyCreatedReply:
    require(principal, Permission.KEY_WRITE, tenant)
    applied, _ = applied_tenant(current, tenant)
    spec = applied.spec
    served = set(
        route_table(spec, spec.gateway.backend_host, spec.gateway.backends).models_of(tenant)
    )
    unknown = [name for name in body.models if name not in served]
    if unknown:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            f"models: tenant {tenant!r} does not serve {', '.join(unknown)}; "
            f"it serves: {', '.join(sorted(served)) or 'no models'}",
            field="models",
        )
    now = clock.utc_now()
    if body.expires_at is not None and checked_time(body.expires_at, "expires_at") <= now:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            "expires_at: give a future time with a timezone (e.g. 2027-01-01T00:00:00Z)",
            field="expires_at",
        )
    secret, key = keys.create(
        tenant,
        body.name,
        body.models,
        body.expires_at,
        body.limits,
        now,
        principal.actor,
        made_by=credential_maker(people, current, principal),
    )
    return KeyCreatedReply(**key_reply(key, now).model_dump(), key=secret)


@router.delete("/tenants/{tenant}/keys/{prefix}", response_model=KeyReply)
def revoke_key(
    tenant: str,
    prefix: str,
    principal: CurrentPrincipal,
    current: Current,
    keys: Keys,
    clock: TheClock,
) -> KeyReply:
    require(principal, Permission.KEY_WRITE, tenant)
    applied_tenant(current, tenant)
    if not any(k.prefix == prefix for k in keys.list(tenant)):
        raise ApiProblem(ErrorCode.NOT_FOUND, f"tenant {tenant!r} has no key {prefix!r}")
    now = clock.utc_now()
    return key_reply(keys.revoke(prefix, now, principal.actor), now)
