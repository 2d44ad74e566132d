"""Who is calling: the bearer token (gpuplex's own, or the identity provider's: server/oidc_principal.py),
or else the dashboard's session cookie (server/sign_in.py), becomes a Principal, and `require` turns an RBAC verdict into the API's answer (403, or 404 for
another tenant's object, worded as if it did not exist)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpuplex.clock import Clock
from gpuplex.core.access import Permission, Principal, Role, Verdict, decide
from gpuplex.errors import ErrorCode
from gpuplex.oidc.tokens import looks_like_jwt
from gpuplex.server.body_guard import ENDED_SESSION
from gpuplex.server.dependencies import Identities, Sessions, TheClock, Throttle, Tokens
from gpuplex.server.failure_throttle import client_address
from gpuplex.server.oidc_principal import (
    TENANT_HEADER,
    OidcIdentities,
    TenantChoice,
    oidc_principal,
    principal_of_groups,
)
from gpuplex.server.problems import ApiProblem
from gpuplex.server.sign_in import require_csrf, session_cookie
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import WebSessions

_bearer = HTTPBearer(
    auto_error=False,
    description="A control-plane token (gpt_<prefix>_<secret>), or a token from the identity "
    "provider the spec's auth.oidc names",
)


@dataclass(frozen=True, slots=True)
class CallerLookup:
    """What finds who a request's credentials speak for: gpuplex's own tokens, the dashboard's
    sessions, the identity provider's people, and the clock expiry is measured on."""

    tokens: TokenRepository
    sessions: WebSessions
    identities: OidcIdentities
    clock: Clock


async def caller_lookup(
    tokens: Tokens, sessions: Sessions, identities: Identities, clock: TheClock
) -> CallerLookup:
    return CallerLookup(tokens=tokens, sessions=sessions, identities=identities, clock=clock)


Callers = Annotated[CallerLookup, Depends(caller_lookup)]


async def current_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    callers: Callers,
) -> Principal:
    """On the event loop: the store is read in a worker thread, and an identity provider's
    token that needs its keys fetched awaits the fetch without holding one."""
    cookie = session_cookie(request)
    if credentials is None and cookie:  # the dashboard, signed in with the identity provider
        principal = await run_in_threadpool(session_principal, callers, request, cookie)
        request.state.principal = principal
        return principal
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiProblem(
            ErrorCode.UNAUTHENTICATED,
            "send `Authorization: Bearer <token>`; an admin creates tokens with "
            "`gpuplex token create` or POST /api/v1/tokens",
        )
    if looks_like_jwt(credentials.credentials):  # the identity provider's (auth.oidc)
        principal = await oidc_principal(
            callers.identities, credentials.credentials, chosen_tenant(request)
        )
        request.state.principal = principal
        return principal
    identity = await run_in_threadpool(
        callers.tokens.authenticate, credentials.credentials, callers.clock.utc_now()
    )
    if identity is None:
        raise ApiProblem(ErrorCode.UNAUTHENTICATED, "the token is unknown, revoked or expired")
    principal = Principal(
        name=identity.name,
        role=Role(identity.role),
        tenant=identity.tenant,
        token_prefix=identity.prefix,
    )
    request.state.principal = principal
    return principal


def session_principal(callers: CallerLookup, request: Request, cookie: str) -> Principal:
    """The person a dashboard session cookie speaks for, with roles from the groups their sign-in
    saw under the rules applied now; a change needs the session's CSRF token."""
    session = callers.sessions.find(cookie, callers.clock.utc_now())
    if session is None:
        raise ApiProblem(ErrorCode.UNAUTHENTICATED, ENDED_SESSION)
    require_csrf(request, cookie)
    return principal_of_groups(
        callers.identities,
        list(session.groups),
        session.subject,
        session.name,
        session.issuer,
        chosen_tenant(request),
    )


def chosen_tenant(request: Request) -> TenantChoice:
    """The tenant a person with roles on several says this request is for: the X-Gpuplex-Tenant
    header, and the path's `{tenant}`."""
    in_path = request.path_params.get("tenant")
    return request.headers.get(TENANT_HEADER) or None, in_path if isinstance(in_path, str) else None


async def counted_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    callers: Callers,
    throttle: Throttle,
) -> Principal:
    """`current_principal` with the failure throttle (server/failure_throttle.py): credentials
    that fail count against the client address, and past its failures they are answered 429
    instead of 401; credentials that hold are always taken."""
    try:
        return await current_principal(request, credentials, callers)
    except ApiProblem as refused:
        presented = credentials is not None or bool(session_cookie(request))
        if refused.code is not ErrorCode.UNAUTHENTICATED or not presented:
            raise
        address = client_address(request)
        raise throttle.answer_to_failure(address, refused) from None


CurrentPrincipal = Annotated[Principal, Depends(counted_principal)]


def require(principal: Principal, permission: Permission, tenant: str | None = None) -> None:
    verdict = decide(principal, permission, tenant)
    if verdict is Verdict.NOT_FOUND:
        raise no_such_tenant(tenant or "")
    if verdict is Verdict.FORBIDDEN:
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            f"the {principal.role} role may not {permission.value.replace('.', ' ')}",
        )


def no_such_tenant(tenant: str, hint: str = "") -> ApiProblem:
    """The one answer for a tenant that does not exist or is not the caller's to see; `hint`
    (` (did you mean "acme"?)`) only for a caller who may see every tenant."""
    return ApiProblem(ErrorCode.NOT_FOUND, f"no tenant {tenant!r}{hint}", field="tenant")
