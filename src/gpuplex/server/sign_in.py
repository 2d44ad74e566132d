"""Signing in to the dashboard with the identity provider, and out again (`/auth/...`).

- `GET /auth/config`: whether this control plane offers the sign-in (the applied spec's auth.oidc).
- `GET /auth/login?return_to=/dashboard/`: begins a sign-in (authorization code + PKCE, a state and
  a nonce kept server-side, bound to this browser by a short-lived cookie) and sends the browser to
  the provider. When this client address has as many sign-ins under way as one address may, or
  the store as many as it keeps in all (store/web_sessions.py), the answer is 429
  `too_many_sign_ins` with `Retry-After`: sign-ins begun before are never dropped to make room.
- `GET /auth/callback`: where the provider sends the browser back; the code is exchanged, the
  tokens verified, the person's groups noted (what they made follows them:
  server/credential_grants.py), the groups must give a role, and a session begins: an HttpOnly
  `SameSite=Strict` session cookie (`Secure` when served over TLS). Failures come back to the
  dashboard as `#signin_error=...`, never as a token or a stack trace, and count against the
  client address (server/failure_throttle.py): past its limit the address's callbacks get 429
  `too_many_failed_auth` before the state is looked up.
- `GET /auth/session`: whether this browser is signed in, and if so who, what they may choose, and
  the session's CSRF token, which the page sends back as `X-CSRF-Token` on every change
  (server/auth.py checks it). Another site can neither read this answer nor make the token.
- `POST /auth/logout`: ends the session (with its CSRF token): the cookie stops working at once.

Browsers share cookies between the ports of one host name, so the cookies are named after the
port the request came to (`gpuplex_session_8090`): two control planes on one machine keep their
sessions apart.

Bearer tokens (gpuplex's own, the `#token=` links, and the provider's) keep working beside it; a
link never replaces a signed-in session unasked (dashboard/tokenlink.js).
"""

from __future__ import annotations

import logging
import re
import urllib.parse
from datetime import UTC, datetime
from functools import partial

import anyio
from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response

from gpuplex.clock import now_s
from gpuplex.core.spec.auth import OidcSpec
from gpuplex.errors import ErrorCode, IdentityProviderUnavailable, OidcTokenError, TooManySignIns
from gpuplex.revision import AppliedRevisions
from gpuplex.server.credential_grants import SEEN_AT_SIGN_IN, note_groups_seen
from gpuplex.server.dependencies import Current, Identities, Sessions, TheClock, Throttle
from gpuplex.server.failure_throttle import client_address
from gpuplex.server.oidc_code_flow import (
    SignedInPerson,
    authorization_url,
    exchange_code,
    signed_in_person,
)
from gpuplex.server.oidc_principal import NO_ROLE, OidcIdentities, grants_for
from gpuplex.server.problems import ApiProblem
from gpuplex.store.web_sessions import (
    PendingSignIn,
    WebSessions,
    csrf_matches,
    csrf_token_of,
    new_secret,
)

SESSION_COOKIE = "gpuplex_session"
CSRF_HEADER = "x-csrf-token"
SIGN_IN_COOKIE = "gpuplex_sign_in"
DASHBOARD = "/dashboard/"
#: A local path to come back to after signing in: never another site (`//evil`, `/\evil`).
_LOCAL_PATH = re.compile(r"^/(?![/\\])[^\x00-\x20\x7f\\]{0,2000}$")
#: Methods that change nothing: everything else needs the session's CSRF token.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Sign-ins that may wait on the provider's token endpoint at once (each holds a thread).
PROVIDER_THREADS = 8

log = logging.getLogger(__name__)
router = APIRouter(prefix="/auth", include_in_schema=False)


def cookie_name(base: str, host: str | None) -> str:
    """`base`, with the port of the request's Host when it names one: `gpuplex_session_8090`."""
    port = (host or "").rpartition("]")[2].rpartition(":")[2] if ":" in (host or "") else ""
    return f"{base}_{port}" if port.isdigit() else base


def session_cookie(request: Request) -> str | None:
    """The session cookie this request carries, if any."""
    return request.cookies.get(cookie_name(SESSION_COOKIE, request.headers.get("host")))


def _oidc(current: AppliedRevisions) -> OidcSpec | None:
    applied = current.get()
    return applied.spec.auth.oidc if applied is not None else None


@router.get("/config")
def sign_in_config(current: Current) -> dict[str, object]:
    oidc = _oidc(current)
    return {"oidc": None if oidc is None else {"issuer": oidc.issuer}}


@router.get("/login")
async def begin_sign_in(
    request: Request, identities: Identities, sessions: Sessions, return_to: str = DASHBOARD
) -> Response:
    oidc = _oidc(identities.current)
    if oidc is None:
        raise ApiProblem(
            ErrorCode.NOT_FOUND,
            "this control plane has no identity provider (the applied spec has no auth.oidc): "
            "sign in with a gpuplex token",
        )
    if not _LOCAL_PATH.match(return_to):
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST, "return_to must be a path on this site", field="return_to"
        )
    state, browser = new_secret(), new_secret()
    pending = PendingSignIn(code_verifier=new_secret(), nonce=new_secret(), return_to=return_to)
    endpoint = await identities.issuer_keys.of(oidc.issuer).endpoint_for("authorization_endpoint")
    try:
        await run_in_threadpool(
            partial(
                sessions.begin_sign_in,
                state=state,
                browser=browser,
                client=client_address(request),
                pending=pending,
                now=identities.clock.utc_now(),
            )
        )
    except TooManySignIns as full:
        raise ApiProblem(
            ErrorCode.TOO_MANY_SIGN_INS, full.message, retry_after_s=full.retry_after_s
        ) from None
    target = authorization_url(
        endpoint,
        oidc,
        redirect_uri=_callback_url(request),
        state=state,
        nonce=pending.nonce,
        code_verifier=pending.code_verifier,
    )
    reply = RedirectResponse(target, status_code=303)
    reply.set_cookie(
        cookie_name(SIGN_IN_COOKIE, request.headers.get("host")),
        browser,
        max_age=600,
        path="/auth/",
        httponly=True,
        secure=_tls(request),
        samesite="lax",  # it must come back with the provider's redirect, a cross-site navigation
    )
    return reply


@router.get("/callback", name="sign_in_callback")
async def finish_sign_in(
    request: Request,
    identities: Identities,
    sessions: Sessions,
    throttle: Throttle,
    state: str = "",
    code: str = "",
    error: str = "",
    error_description: str = "",
) -> Response:
    oidc = _oidc(identities.current)
    if error:
        return _back_with_error(
            request, f"the identity provider said {error}: {error_description}"[:300]
        )
    if oidc is None or not state or not code:
        return _back_with_error(
            request, "this control plane takes no sign-in now; use a gpuplex token"
        )
    address = client_address(request)
    throttle.refuse_if_throttled(address)  # before the state is looked up
    signed_in = await _signed_in(request, identities, sessions, oidc, state, code)
    if isinstance(signed_in, str):
        throttle.failed(address)
        return _back_with_error(request, signed_in)
    return signed_in


async def _signed_in(
    request: Request,
    identities: OidcIdentities,
    sessions: WebSessions,
    oidc: OidcSpec,
    state: str,
    code: str,
) -> Response | str:
    """The reply that begins the session of the sign-in `state` names (or says the provider
    cannot be read now: not the client's failure); else why the sign-in failed."""
    sign_in_cookie = cookie_name(SIGN_IN_COOKIE, request.headers.get("host"))
    pending = await run_in_threadpool(
        partial(
            sessions.take_sign_in,
            state=state,
            browser=request.cookies.get(sign_in_cookie),
            now=identities.clock.utc_now(),
        )
    )
    if pending is None:
        return "this sign-in expired, was used already or began in another browser: sign in again"
    keys = identities.issuer_keys.of(oidc.issuer)
    try:
        token_endpoint = await keys.endpoint_for("token_endpoint")

        def ask_the_provider() -> SignedInPerson:
            tokens = exchange_code(
                token_endpoint,
                oidc,
                code=code,
                redirect_uri=_callback_url(request),
                code_verifier=pending.code_verifier,
            )
            return signed_in_person(keys, oidc, tokens, nonce=pending.nonce, now_s=now_s())

        person = await anyio.to_thread.run_sync(ask_the_provider, limiter=_provider_lane(request))
        await run_in_threadpool(
            note_groups_seen,
            identities.people,
            identities.current,
            identities.clock,
            person.groups,
            person.subject,
            person.name,
            oidc.issuer,
            SEEN_AT_SIGN_IN,
        )
        if not grants_for(identities.current, person.groups, oidc.issuer):
            return NO_ROLE
    except OidcTokenError as failed:
        log.warning("a dashboard sign-in failed: %s", failed.message)
        return failed.message
    except IdentityProviderUnavailable as unavailable:
        log.warning("a dashboard sign-in failed: %s", unavailable.message)
        return _back_with_error(request, unavailable.message)
    now = identities.clock.utc_now()
    cookie, _ = await run_in_threadpool(
        partial(
            sessions.create,
            issuer=oidc.issuer,
            subject=person.subject,
            name=person.name,
            groups=person.groups,
            now=now,
            expires_at=datetime.fromtimestamp(person.expires_at_s, UTC),
        )
    )
    reply = RedirectResponse(pending.return_to, status_code=303)
    reply.set_cookie(
        cookie_name(SESSION_COOKIE, request.headers.get("host")),
        cookie,
        max_age=max(1, int(person.expires_at_s - now_s())),
        path="/",
        httponly=True,
        secure=_tls(request),
        samesite="strict",
    )
    reply.delete_cookie(sign_in_cookie, path="/auth/")
    return reply


@router.get("/session")
def current_session(
    request: Request, sessions: Sessions, current: Current, clock: TheClock
) -> dict[str, object]:
    """Whether this browser is signed in; if so, who, what they may choose (the platform, or the
    tenants their groups give roles on: the dashboard asks which and sends X-Gpuplex-Tenant), and
    the CSRF token its changes must carry. 200 either way: the page asks before it knows."""
    cookie = session_cookie(request)
    session = sessions.find(cookie, clock.utc_now()) if cookie else None
    if cookie is None or session is None:
        return {"signed_in": False}
    grants = grants_for(current, list(session.groups), session.issuer)
    return {
        "signed_in": True,
        "name": session.name,
        "platform": any(g.tenant is None for g in grants),
        "tenants": sorted({g.tenant for g in grants if g.tenant is not None}),
        "expires_at": session.expires_at.isoformat(),
        "csrf_token": csrf_token_of(cookie),
    }


@router.post("/logout")
def sign_out(request: Request, sessions: Sessions, clock: TheClock) -> Response:
    cookie = session_cookie(request)
    session = sessions.find(cookie, clock.utc_now()) if cookie else None
    if cookie is None or session is None:
        raise ApiProblem(ErrorCode.UNAUTHENTICATED, "there is no dashboard session to end")
    require_csrf(request, cookie)
    sessions.end(cookie, clock.utc_now())
    reply = JSONResponse({"signed_out": True})
    reply.delete_cookie(cookie_name(SESSION_COOKIE, request.headers.get("host")), path="/")
    return reply


def require_csrf(request: Request, cookie: str) -> None:
    """A change made with a session cookie must carry the session's CSRF token."""
    if request.method in SAFE_METHODS:
        return
    if not csrf_matches(cookie, request.headers.get(CSRF_HEADER)):
        raise ApiProblem(
            ErrorCode.CSRF_REJECTED,
            "a change made with a dashboard session must carry its X-CSRF-Token header "
            "(GET /auth/session gives it)",
        )


def _provider_lane(request: Request) -> anyio.CapacityLimiter:
    """The worker threads sign-ins may hold while the provider answers (the token exchange): a
    lane of their own, so a provider that hangs ties up these and no others."""
    lane = getattr(request.app.state, "provider_lane", None)
    if lane is None:
        lane = request.app.state.provider_lane = anyio.CapacityLimiter(PROVIDER_THREADS)
    assert isinstance(lane, anyio.CapacityLimiter)
    return lane


def _callback_url(request: Request) -> str:
    return str(request.url_for("sign_in_callback"))


def _tls(request: Request) -> bool:
    return request.url.scheme == "https"


def _back_with_error(request: Request, message: str) -> Response:
    fragment = urllib.parse.urlencode({"signin_error": message})
    reply = RedirectResponse(f"{DASHBOARD}#{fragment}", status_code=303)
    reply.delete_cookie(cookie_name(SIGN_IN_COOKIE, request.headers.get("host")), path="/auth/")
    return reply
