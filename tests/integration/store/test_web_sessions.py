"""Dashboard sessions and sign-ins under way, on SQLite and PostgreSQL: a sign-in's state is good
once, only in the browser that began it and only for ten minutes; a session is found by its cookie
until it expires or is ended, and only its cookie makes its CSRF token; only hashes are stored; signing in and out are audited; a flood of
sign-ins cannot grow the table past its cap."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.store import web_sessions as web
from gpuplex.store.audit import AuditLog
from gpuplex.store.tables import WebSessionRow, WebSignInRow
from gpuplex.store.web_sessions import PendingSignIn, WebSessions

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ISSUER = "https://login.example.com/realms/acme"
PENDING = PendingSignIn(code_verifier="v" * 43, nonce="n" * 43, return_to="/dashboard/")


def begin(sessions: WebSessions, state: str = "state-1", browser: str = "browser-1") -> None:
    sessions.begin_sign_in(state=state, browser=browser, pending=PENDING, now=T0)


def test_a_state_is_good_once_and_only_in_its_browser(engine: Engine) -> None:
    sessions = WebSessions(engine)
    begin(sessions)
    assert sessions.take_sign_in(state="state-1", browser="browser-1", now=T0) == PENDING
    assert sessions.take_sign_in(state="state-1", browser="browser-1", now=T0) is None
    begin(sessions, "state-2")
    assert sessions.take_sign_in(state="state-2", browser="someone-else", now=T0) is None
    begin(sessions, "state-3")
    assert sessions.take_sign_in(state="state-3", browser=None, now=T0) is None


def test_another_browsers_try_does_not_cancel_a_sign_in(engine: Engine) -> None:
    """Whoever learns a state (a proxy's log, a link passed on) cannot end the sign-in of the
    person who began it: the state is checked against the browser before anything is removed."""
    sessions = WebSessions(engine)
    begin(sessions)
    for intruder in ("someone-else", None, ""):
        assert sessions.take_sign_in(state="state-1", browser=intruder, now=T0) is None
    assert sessions.take_sign_in(state="state-1", browser="browser-1", now=T0) == PENDING
    assert sessions.take_sign_in(state="state-1", browser="browser-1", now=T0) is None


def test_a_sign_in_lasts_ten_minutes(engine: Engine) -> None:
    sessions = WebSessions(engine)
    begin(sessions)
    late = T0 + web.SIGN_IN_TTL + timedelta(seconds=1)
    assert sessions.take_sign_in(state="state-1", browser="browser-1", now=late) is None


def test_a_session_is_found_until_it_expires_or_ends_and_both_are_audited(
    engine: Engine,
) -> None:
    sessions = WebSessions(engine)
    cookie, _ = sessions.create(
        issuer=ISSUER,
        subject="u-42",
        name="ada@example.com",
        groups=["gpu-acme-admins"],
        now=T0,
        expires_at=T0 + timedelta(hours=1),
    )
    found = sessions.find(cookie, T0 + timedelta(minutes=59))
    assert found is not None
    assert (found.subject, found.groups) == ("u-42", ("gpu-acme-admins",))
    assert web.csrf_matches(cookie, web.csrf_token_of(cookie))
    assert not web.csrf_matches(cookie, "guess")
    assert not web.csrf_matches(cookie, None)
    assert not web.csrf_matches(web.new_secret(), web.csrf_token_of(cookie))  # another session's
    assert sessions.find(cookie, T0 + timedelta(hours=1)) is None  # expired
    assert sessions.find("not-a-cookie", T0) is None
    assert sessions.end(cookie, T0 + timedelta(minutes=5))
    assert sessions.find(cookie, T0 + timedelta(minutes=6)) is None
    assert not sessions.end(cookie, T0 + timedelta(minutes=7))
    actors = {e.action: e.actor for e in AuditLog(engine).entries()}
    assert actors["session.sign-in"] == f"ada@example.com (oidc u-42 at {ISSUER})"
    assert actors["session.sign-out"] == actors["session.sign-in"]


def test_only_hashes_of_the_cookie_state_and_browser_are_stored(
    engine: Engine,
) -> None:
    sessions = WebSessions(engine)
    begin(sessions, "the-state", "the-browser")
    cookie, _ = sessions.create(
        issuer=ISSUER, subject="s", name="n", groups=[], now=T0, expires_at=T0 + timedelta(hours=1)
    )
    with Session(engine) as session:
        stored = [
            *session.execute(select(WebSessionRow.session_hash)),
            *session.execute(select(WebSignInRow.state_hash, WebSignInRow.browser_hash)),
        ]
    values = {value for row in stored for value in row}
    for secret in (cookie, "the-state", "the-browser"):
        assert secret not in values
        assert web.secret_hash(secret) in values
    assert web.csrf_token_of(cookie) not in values


def test_a_flood_of_sign_ins_stays_under_the_cap(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web, "MAX_SIGN_INS", 5)
    sessions = WebSessions(engine)
    for n in range(12):
        sessions.begin_sign_in(
            state=f"s{n}", browser="b", pending=PENDING, now=T0 + timedelta(seconds=n)
        )
    with Session(engine) as session:
        assert len(list(session.scalars(select(WebSignInRow.state_hash)))) == 5
    # the newest are kept
    later = T0 + timedelta(seconds=12)
    assert sessions.take_sign_in(state="s11", browser="b", now=later) == PENDING
    assert sessions.take_sign_in(state="s0", browser="b", now=later) is None
