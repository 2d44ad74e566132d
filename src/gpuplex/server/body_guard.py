"""The control plane's bound on request bodies: a pure ASGI middleware, outside every route, so no
body is read before the caller is known and none is read past its limit.

For a request that carries a body:
- under /api/v1, the caller is checked first: no bearer token at all (nor a dashboard session
  cookie), or one the store does not know (or has revoked, suspended, or seen expire), gets 401
  before a byte of the body is read; a token or cookie refused counts against the client address,
  and past its failures the address's refusals are 429 instead (server/failure_throttle.py);
- a declared Content-Length over `max_body_bytes` gets 413 before a byte is read;
- while the app reads, the bytes are counted: past `max_body_bytes` the app reads no more and the
  client gets 413; a body that has not all come within `body_timeout_s` gets 408.

The answers are the server's problem JSON (gpuplex.server.problems) with stable codes:
`unauthenticated` (401), `too_many_failed_auth` (429), `request_too_large` (413),
`request_timeout` (408). What the client still sends after an early answer is not parsed: the
answer says `Connection: close`, so no client sends its next request on a connection the server
is about to close, and the front door (gpuplex/http_guard.py) drops a little, stops reading, and
closes it.

Every /api/v1 route that takes a body needs a bearer token or a dashboard session today (the
sign-in's own routes live under /auth/, outside this check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuplex.clock import Clock
from gpuplex.core.serve.keys import bearer_token
from gpuplex.errors import CredentialSuspended, ErrorCode, IdentityProviderUnavailable, StoreError
from gpuplex.http_limits import client_key
from gpuplex.oidc.tokens import looks_like_jwt
from gpuplex.server.failure_throttle import FailureThrottle
from gpuplex.server.oidc_principal import OidcIdentities, oidc_principal
from gpuplex.server.problems import ApiProblem, problem_response
from gpuplex.server.sign_in import SESSION_COOKIE, cookie_name
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import WebSessions

#: The largest body the API takes: a whole spec (1,000,000 characters) as JSON, with room.
MAX_BODY_BYTES = 8 * 1024 * 1024
BODY_TIMEOUT_S = 30.0
API_PREFIX = "/api/v1/"

#: The same words as gpuplex.server.auth, which answers for requests without a body.
NO_CREDENTIALS = (
    "send `Authorization: Bearer <token>`; an admin creates tokens with "
    "`gpuplex token create` or POST /api/v1/tokens"
)
UNKNOWN_CREDENTIALS = "the token is unknown, revoked or expired"
ENDED_SESSION = "the dashboard session ended or is unknown: sign in again"

#: token -> whether it is a known, active control-plane token (awaited on the event loop).
Authenticate = Callable[[str], Awaitable[bool]]
#: session cookie -> whether it is a live dashboard session (called in a worker thread).
KnownSession = Callable[[str], bool]


def active_token_check(
    identities: OidcIdentities, tokens: TokenRepository, clock: Clock
) -> Authenticate:
    """The check of gpuplex.server.auth: a known token, neither revoked nor expired, now; or an
    identity provider's token that verifies (the route then says whether its groups give a role,
    and answers for a provider it cannot read)."""

    async def active(token: str) -> bool:
        if looks_like_jwt(token):
            try:
                await oidc_principal(identities, token)
            except ApiProblem as refused:
                return refused.code is not ErrorCode.UNAUTHENTICATED
            except IdentityProviderUnavailable:
                return True  # the route answers for that (503)
            return True
        try:
            found = await anyio.to_thread.run_sync(tokens.authenticate, token, clock.utc_now())
        except StoreError:  # the store is unavailable: the route answers for that (503)
            return True
        return found is not None

    return active


def live_session_check(sessions: WebSessions, clock: Clock) -> KnownSession:
    """The dashboard session check of gpuplex.server.auth (which checks its CSRF token too)."""
    return lambda cookie: sessions.find(cookie, clock.utc_now()) is not None


class BodyGuard:
    def __init__(
        self,
        app: ASGIApp,
        authenticate: Authenticate | None = None,
        known_session: KnownSession | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        body_timeout_s: float = BODY_TIMEOUT_S,
        throttle: FailureThrottle | None = None,
    ) -> None:
        self.app = app
        self.authenticate = authenticate
        self.known_session = known_session
        self.throttle = throttle
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _header(scope, b"content-length")
        chunked = _header(scope, b"transfer-encoding") is not None
        if not chunked and (declared is None or declared.strip() in (b"", b"0")):
            await self.app(scope, receive, send)  # no body: nothing to bound
            return
        refusal = await self._refusal(scope, declared)
        if refusal is not None:
            await problem_response(refusal, UNREAD)(scope, receive, send)
            return
        body = BoundedBody(scope, receive, send, self.max_body_bytes, self.body_timeout_s)
        try:
            await self.app(scope, body.receive, body.send)
        except Exception:
            if not body.answered:
                raise  # else the app failed because its body was cut short: already answered

    async def _refusal(self, scope: Scope, declared: bytes | None) -> ApiProblem | None:
        if str(scope["path"]).startswith(API_PREFIX):
            token = bearer_token(_header(scope, b"authorization"))
            if token is None:
                return await self._session_refusal(scope)
            try:
                known = self.authenticate is None or await self.authenticate(token)
            except CredentialSuspended as suspended:  # a real credential, its maker's grant gone
                return ApiProblem(ErrorCode.UNAUTHENTICATED, suspended.message)
            if not known:
                return self._failed(
                    scope, ApiProblem(ErrorCode.UNAUTHENTICATED, UNKNOWN_CREDENTIALS)
                )
        size = declared.strip() if declared is not None else b""
        if size.isdigit() and int(size) > self.max_body_bytes:
            return too_large(self.max_body_bytes)
        return None

    async def _session_refusal(self, scope: Scope) -> ApiProblem | None:
        host = (_header(scope, b"host") or b"").decode("latin-1")
        cookies = cookie_parser((_header(scope, b"cookie") or b"").decode("latin-1"))
        cookie = cookies.get(cookie_name(SESSION_COOKIE, host))
        if not cookie:
            return ApiProblem(ErrorCode.UNAUTHENTICATED, NO_CREDENTIALS)
        if self.known_session is not None and not await _known(self.known_session, cookie):
            return self._failed(scope, ApiProblem(ErrorCode.UNAUTHENTICATED, ENDED_SESSION))
        return None

    def _failed(self, scope: Scope, refusal: ApiProblem) -> ApiProblem:
        """`refusal` of credentials that were presented, counted against the client address
        (429 instead once the address is past its failures)."""
        if self.throttle is None:
            return refusal
        return self.throttle.answer_to_failure(_client(scope), refusal)


async def _known(known_session: KnownSession, cookie: str) -> bool:
    try:
        return await anyio.to_thread.run_sync(known_session, cookie)
    except StoreError:  # the store is unavailable: the route answers for that (503)
        return True


def too_large(max_bytes: int) -> ApiProblem:
    return ApiProblem(
        ErrorCode.REQUEST_TOO_LARGE, f"the request body is larger than {max_bytes} bytes"
    )


class BoundedBody:
    """The app's receive and send for one request: the body counted and timed as it is read,
    and the guard's own answer, once given, the only one the client gets."""

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, max_bytes: int, timeout_s: float
    ) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.size = 0
        self.deadline: float | None = None
        self.complete = False  # the whole body was read
        self.answered = False  # the guard answered; the app's messages are dropped
        self.started = False  # the app started its reply

    async def receive(self) -> Message:
        if self.answered:
            return {"type": "http.disconnect"}
        if self.complete:
            return await self._receive()  # after the body: the app waits for a disconnect
        loop = asyncio.get_running_loop()
        if self.deadline is None:
            self.deadline = loop.time() + self.timeout_s
        try:
            async with asyncio.timeout_at(self.deadline):
                message = await self._receive()
        except TimeoutError:
            message_text = f"the request body did not arrive within {self.timeout_s:g} s"
            await self._answer(ApiProblem(ErrorCode.REQUEST_TIMEOUT, message_text))
            return {"type": "http.disconnect"}
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.max_bytes:
                await self._answer(too_large(self.max_bytes))
                return {"type": "http.disconnect"}
            if not message.get("more_body", False):
                self.complete = True
        return message

    async def send(self, message: Message) -> None:
        if self.answered:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)

    async def _answer(self, problem: ApiProblem) -> None:
        self.answered = True
        if not self.started:  # else the app's reply is cut short; nothing more can be said
            await problem_response(problem, UNREAD)(self.scope, _no_receive, self._send)


#: An answer given before the body was read whole ends its connection, and says so: a client that
#: sent its next request on it would race the close (and get no answer at all).
UNREAD = {"connection": "close"}


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _client(scope: Scope) -> str:
    """The client address, keyed as server/failure_throttle.py keys it."""
    client: Any = scope.get("client")
    return client_key(None if client is None else (str(client[0]), int(client[1])))


def _header(scope: Scope, name: bytes) -> bytes | None:
    headers: Any = scope.get("headers", [])
    for key, value in headers:
        if key == name:
            return bytes(value)
    return None
