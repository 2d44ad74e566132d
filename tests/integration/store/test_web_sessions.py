"""Dashboard sessions and sign-ins under way, on SQLite and PostgreSQL: a sign-in's state is good
once, only in the browser that began it and only for ten minutes; a session is found by its cookie
until it expires or is ended, and only its cookie makes its CSRF token; only hashes are stored;
signing in and out are audited; sign-ins under way are bounded per client address and in all,
and a full table refuses new ones, never dropping one begun before, even under concurrent begins."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from gpuplex.errors import TooManySignIns
from gpuplex.store import web_sessions as web
from gpuplex.store.audit import AuditLog
from gpuplex.store.tables import WebSessionRow, WebSignInRow
from gpuplex.store.web_sessions import PendingSignIn, WebSessions

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
ISSUER = "https://login.example.com/realms/acme"
PENDING = PendingSignIn(code_verifier="v" * 43, nonce="n" * 43, return_to="/dashboard/")


def begin(
    sessions: WebSessions,
    state: str = "state-1",
    browser: str = "browser-1",
    *,
    client: str = "192.0.2.1",
    now: datetime = T0,
) -> None:
    sessions.begin_sign_in(state=state, browser=browser, client=client, pending=PENDING, now=now)


def under_way(engine: Engine) -> int:
    with Session(engine) as session:
        return session.scalar(select(func.count()).select_from(WebSignInRow)) or 0


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


def test_only_hashes_of_the_cookie_state_browser_and_address_are_stored(
    engine: Engine,
) -> None:
    sessions = WebSessions(engine)
    begin(sessions, "the-state", "the-browser", client="198.51.100.7")
    cookie, _ = sessions.create(
        issuer=ISSUER, subject="s", name="n", groups=[], now=T0, expires_at=T0 + timedelta(hours=1)
    )
    with Session(engine) as session:
        stored = [
            *session.execute(select(WebSessionRow.session_hash)),
            *session.execute(
                select(WebSignInRow.state_hash, WebSignInRow.browser_hash, WebSignInRow.client_hash)
            ),
        ]
    values = {value for row in stored for value in row}
    for secret in (cookie, "the-state", "the-browser", "198.51.100.7"):
        assert secret not in values
        assert web.secret_hash(secret) in values
    assert web.csrf_token_of(cookie) not in values


def test_one_address_has_at_most_its_bound_under_way_and_others_still_begin(
    engine: Engine,
) -> None:
    sessions = WebSessions(engine, max_sign_ins=100, sign_ins_per_client=3)
    for n in range(3):
        begin(sessions, f"ours-{n}", client="192.0.2.1", now=T0 + timedelta(seconds=n))
    later = T0 + timedelta(seconds=30)
    with pytest.raises(TooManySignIns) as refused:
        begin(sessions, "one-too-many", client="192.0.2.1", now=later)
    assert refused.value.retry_after_s == 570  # when the address's oldest expires
    assert refused.value.code.status == 429
    assert "this address has 3 sign-ins under way" in refused.value.message
    begin(sessions, "theirs", client="192.0.2.2", now=later)  # another address is not held up
    assert under_way(engine) == 4
    # a sign-in used frees its place at once; one expired frees it when it expires
    assert sessions.take_sign_in(state="ours-1", browser="browser-1", now=later) == PENDING
    begin(sessions, "ours-again", client="192.0.2.1", now=later)
    with pytest.raises(TooManySignIns):
        begin(sessions, "still-too-many", client="192.0.2.1", now=later)
    begin(sessions, "after-expiry", client="192.0.2.1", now=T0 + web.SIGN_IN_TTL)
    for state in ("ours-2", "ours-again", "after-expiry", "theirs"):
        taken = sessions.take_sign_in(state=state, browser="browser-1", now=T0 + web.SIGN_IN_TTL)
        assert taken == PENDING, state


def test_a_full_table_refuses_new_sign_ins_and_keeps_the_old_ones(engine: Engine) -> None:
    """A flood cannot push out a sign-in begun before it: at the cap the new one is refused,
    whatever its address, and every sign-in under way stays until it is used or expires."""
    sessions = WebSessions(engine, max_sign_ins=5, sign_ins_per_client=100)
    begin(sessions, "the-person", client="203.0.113.9")
    for n in range(4):
        begin(sessions, f"flood-{n}", client="192.0.2.66", now=T0 + timedelta(seconds=1 + n))
    flood_at = T0 + timedelta(seconds=60)
    for n, client in enumerate(["192.0.2.66", "192.0.2.67", "203.0.113.9"]):
        with pytest.raises(TooManySignIns) as refused:
            begin(sessions, f"refused-{n}", client=client, now=flood_at)
        assert refused.value.retry_after_s == 540  # when the oldest of all expires
        assert "as many as it keeps" in refused.value.message
    assert under_way(engine) == 5
    assert sessions.take_sign_in(state="the-person", browser="browser-1", now=flood_at) == PENDING
    begin(sessions, "room-again", client="192.0.2.67", now=flood_at)
    with pytest.raises(TooManySignIns):
        begin(sessions, "full-again", client="192.0.2.68", now=flood_at)


def test_expired_sign_ins_are_removed_when_one_begins_or_is_refused(engine: Engine) -> None:
    sessions = WebSessions(engine, max_sign_ins=2, sign_ins_per_client=1)
    begin(sessions, "a", client="192.0.2.1")
    begin(sessions, "b", client="192.0.2.2", now=T0 + timedelta(minutes=5))
    with pytest.raises(TooManySignIns):  # refused, but "a" (expired by then) is removed
        begin(sessions, "c", client="192.0.2.2", now=T0 + web.SIGN_IN_TTL)
    assert under_way(engine) == 1
    begin(sessions, "d", client="192.0.2.3", now=T0 + web.SIGN_IN_TTL)
    assert under_way(engine) == 2


def begin_at_once(sessions: WebSessions, clients: list[str], each: int) -> int:
    """One thread per client address, each beginning `each` sign-ins; how many were refused."""
    refused: list[TooManySignIns] = []
    lock = threading.Lock()

    def flood(worker: int, client: str) -> None:
        for n in range(each):
            try:
                begin(sessions, f"{client}-{worker}-{n}", client=client)
            except TooManySignIns as full:
                with lock:
                    refused.append(full)

    workers = [threading.Thread(target=flood, args=w) for w in enumerate(clients)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return len(refused)


def test_sign_ins_begun_at_once_by_many_workers_stay_within_both_bounds(engine: Engine) -> None:
    """Counting and adding happen under one lock: 8 workers beginning 12 sign-ins each at once
    from one address leave exactly that address's bound under way, and 8 more from 8 addresses
    exactly the cap of all."""
    sessions = WebSessions(engine, max_sign_ins=25, sign_ins_per_client=10)
    assert begin_at_once(sessions, ["192.0.2.1"] * 8, 12) == 8 * 12 - 10
    assert under_way(engine) == 10
    assert begin_at_once(sessions, [f"192.0.2.{10 + n}" for n in range(8)], 12) == 8 * 12 - 15
    assert under_way(engine) == 25
