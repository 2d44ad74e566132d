"""Dashboard sessions of people signed in with the identity provider, and the sign-ins under way.

A sign-in under way (authorization code + PKCE) is found by its `state`, must come back to the
browser that began it (a cookie whose hash is kept), is used once and lasts ten minutes. A session
is found by its cookie, of which only the SHA-256 is stored. Its CSRF token is derived from the
cookie (an HMAC keyed with it), so the page can be given it while the cookie stays HttpOnly, and
is compared in constant time. Signing in and out are audited, naming the person by their
subject at their issuer. Expired rows are removed as new ones are written.

Sign-ins under way are bounded twice: `sign_ins_per_client` (20) begun from one client address,
and `max_sign_ins` (10,000) in all. Past either bound the new sign-in is refused (TooManySignIns,
with when the oldest in the way expires); nothing begun before is ever dropped to make room, so a
flood of /auth/login requests can neither grow the table without bound nor push out the sign-in
of a person who is still at the provider. A row is removed only when it is used or has expired.
The client address is kept as its SHA-256 (the caller passes it keyed: an IPv6 address's /64).
Counting and adding happen under one lock (PostgreSQL: an advisory lock; SQLite: its write lock),
so workers that begin sign-ins at the same moment never pass the bounds together.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session

from gpuplex.core.access.policy import oidc_actor
from gpuplex.errors import TooManySignIns
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import WebSessionRow, WebSignInRow

SIGN_IN_TTL = timedelta(minutes=10)
#: Sign-ins under way in all: at this many, new ones are refused until one is used or expires.
MAX_SIGN_INS = 10_000
#: Sign-ins under way begun from one client address: at this many, that address's new ones are
#: refused (a person behind a busy NAT rarely has more than a few at the provider at once).
SIGN_INS_PER_CLIENT = 20


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token_of(cookie: str) -> str:
    """The CSRF token of the session `cookie` opens: only who holds the cookie can make it."""
    digest = hmac.new(cookie.encode(), b"gpuplex dashboard csrf", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_secret() -> str:
    """256 random bits, URL-safe: a session cookie, a CSRF token, a state, a PKCE verifier."""
    return secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    code_verifier: str
    nonce: str
    return_to: str


@dataclass(frozen=True, slots=True)
class WebSession:
    """Who a session cookie speaks for."""

    issuer: str
    subject: str
    name: str
    groups: tuple[str, ...]
    expires_at: datetime

    @property
    def actor(self) -> str:
        return oidc_actor(self.name, self.subject, self.issuer)


def csrf_matches(cookie: str, token: str | None) -> bool:
    """Whether `token` is the CSRF token of the session `cookie` opens."""
    return token is not None and hmac.compare_digest(csrf_token_of(cookie), token)


class WebSessions:
    def __init__(
        self,
        engine: Engine,
        *,
        max_sign_ins: int = MAX_SIGN_INS,
        sign_ins_per_client: int = SIGN_INS_PER_CLIENT,
    ) -> None:
        self._engine = engine
        self.max_sign_ins = max_sign_ins
        self.sign_ins_per_client = sign_ins_per_client

    def begin_sign_in(
        self, *, state: str, browser: str, client: str, pending: PendingSignIn, now: datetime
    ) -> None:
        """Keep a sign-in under way, begun from the client address `client`, for SIGN_IN_TTL.
        TooManySignIns when `client` has `sign_ins_per_client` under way, or the store
        `max_sign_ins` in all: the new one is refused and every older one stays. Expired rows
        are removed first, whether or not there is room."""
        now = aware_utc(now)
        client_hash = secret_hash(client)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.SIGN_INS)  # count, then add: nobody in between
            session.execute(delete(WebSignInRow).where(WebSignInRow.expires_at <= now))
            refused = self._no_room(session, client_hash, now)
            if refused is None:
                session.add(
                    WebSignInRow(
                        state_hash=secret_hash(state),
                        browser_hash=secret_hash(browser),
                        code_verifier=pending.code_verifier,
                        nonce=pending.nonce,
                        return_to=pending.return_to,
                        expires_at=now + SIGN_IN_TTL,
                        client_hash=client_hash,
                    )
                )
        if refused is not None:  # raised after the commit: the expired rows stay removed
            raise refused

    def _no_room(self, session: Session, client_hash: str, now: datetime) -> TooManySignIns | None:
        """Why a sign-in from the address `client_hash` names cannot be kept now, else None."""
        under_way = select(func.count(), func.min(WebSignInRow.expires_at))
        ours, our_oldest = session.execute(
            under_way.where(WebSignInRow.client_hash == client_hash)
        ).one()
        if ours >= self.sign_ins_per_client:
            wait_s = _seconds_until(our_oldest, now)
            return TooManySignIns(
                f"this address has {ours} sign-ins under way, as many as one address may have: "
                f"finish one at the identity provider, or sign in again in {wait_s} s",
                retry_after_s=wait_s,
            )
        everyone, oldest = session.execute(under_way).one()
        if everyone >= self.max_sign_ins:
            wait_s = _seconds_until(oldest, now)
            return TooManySignIns(
                f"the control plane has {everyone} sign-ins under way, as many as it keeps: "
                f"sign in again in {wait_s} s",
                retry_after_s=wait_s,
            )
        return None

    def take_sign_in(
        self, *, state: str, browser: str | None, now: datetime
    ) -> PendingSignIn | None:
        """The sign-in `state` names, removed (a state is good once); None when there is none,
        it expired, or this browser did not begin it. Another browser's try leaves the sign-in
        as it was: whoever learns a state (from a log, a shared link) cannot cancel it."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            row = session.get(WebSignInRow, secret_hash(state))
            if row is None:
                return None
            if aware_utc(row.expires_at) <= now:
                session.delete(row)
                return None
            same_browser = browser is not None and hmac.compare_digest(
                row.browser_hash, secret_hash(browser)
            )
            if not same_browser:
                return None
            session.delete(row)
            return PendingSignIn(row.code_verifier, row.nonce, row.return_to)

    def create(
        self,
        *,
        issuer: str,
        subject: str,
        name: str,
        groups: list[str],
        now: datetime,
        expires_at: datetime,
    ) -> tuple[str, WebSession]:
        """A new session: (its cookie, to give the browser once; what is stored about it)."""
        now, expires_at = aware_utc(now), aware_utc(expires_at)
        cookie = new_secret()
        made = WebSession(issuer, subject, name, tuple(groups), expires_at)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            session.execute(delete(WebSessionRow).where(WebSessionRow.expires_at <= now))
            session.add(
                WebSessionRow(
                    session_hash=secret_hash(cookie),
                    issuer=issuer,
                    subject=subject,
                    name=name,
                    groups=list(groups),
                    created_at=now,
                    expires_at=expires_at,
                )
            )
            append_audit(
                session,
                at=now,
                actor=made.actor,
                action="session.sign-in",
                target=f"oidc:{subject}",
                detail={"groups": list(groups), "expires_at": expires_at.isoformat()},
            )
        return cookie, made

    def find(self, cookie: str, now: datetime) -> WebSession | None:
        """The live session of this cookie, else None."""
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(WebSessionRow, secret_hash(cookie))
            if row is None or aware_utc(row.expires_at) <= aware_utc(now):
                return None
            return WebSession(
                row.issuer,
                row.subject,
                row.name,
                tuple(row.groups),
                aware_utc(row.expires_at),
            )

    def end(self, cookie: str, now: datetime) -> bool:
        """Sign out: the session is removed, so its cookie stops working everywhere at once."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            row = session.get(WebSessionRow, secret_hash(cookie))
            if row is None:
                return False
            actor = oidc_actor(row.name, row.subject, row.issuer)
            session.delete(row)
            append_audit(
                session,
                at=now,
                actor=actor,
                action="session.sign-out",
                target=f"oidc:{row.subject}",
            )
            return True


def _seconds_until(expires_at: datetime | None, now: datetime) -> int:
    """Whole seconds from `now` until `expires_at` (when a sign-in's place frees at the latest),
    rounded up, at least 1."""
    if expires_at is None:
        return 1
    return max(1, math.ceil((aware_utc(expires_at) - now).total_seconds()))
