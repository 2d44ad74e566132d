"""Dashboard sessions of people signed in with the identity provider, and the sign-ins under way.

A sign-in under way (authorization code + PKCE) is found by its `state`, must come back to the
browser that began it (a cookie whose hash is kept), is used once and lasts ten minutes. A session
is found by its cookie, of which only the SHA-256 is stored. Its CSRF token is derived from the
cookie (an HMAC keyed with it), so the page can be given it while the cookie stays HttpOnly, and
is compared in constant time. Signing in and out are audited, naming the person by their
subject at their issuer. Expired rows are removed as new ones are written; the number of sign-ins
under way is capped, so a flood of /auth/login requests cannot grow the table without bound.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.orm import Session

from gpuplex.core.access.policy import oidc_actor
from gpuplex.store.audit import append_audit
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import WebSessionRow, WebSignInRow

SIGN_IN_TTL = timedelta(minutes=10)
#: Sign-ins under way beyond this: the oldest are dropped (they would expire anyway).
MAX_SIGN_INS = 10_000


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
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def begin_sign_in(
        self, *, state: str, browser: str, pending: PendingSignIn, now: datetime
    ) -> None:
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            session.execute(delete(WebSignInRow).where(WebSignInRow.expires_at <= now))
            count = session.scalar(select(func.count()).select_from(WebSignInRow)) or 0
            if count >= MAX_SIGN_INS:
                oldest = select(WebSignInRow.state_hash).order_by(WebSignInRow.expires_at)
                doomed = list(session.scalars(oldest.limit(count - MAX_SIGN_INS + 1)))
                session.execute(delete(WebSignInRow).where(WebSignInRow.state_hash.in_(doomed)))
            session.add(
                WebSignInRow(
                    state_hash=secret_hash(state),
                    browser_hash=secret_hash(browser),
                    code_verifier=pending.code_verifier,
                    nonce=pending.nonce,
                    return_to=pending.return_to,
                    expires_at=now + SIGN_IN_TTL,
                )
            )

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
