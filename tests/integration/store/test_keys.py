"""KeyRepository on SQLite and PostgreSQL: create, list, revoke, the gateway's active records and
version, expiry, prefix collisions, audit entries, and that only the hash is ever stored."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine, text

from gpuplex.core.serve.keys import key_hash, key_matches, key_prefix
from gpuplex.core.spec import RateLimits
from gpuplex.core.spec.rate_limits import MAX_TOKENS_PER_MIN
from gpuplex.errors import NotFoundError, StoreError
from gpuplex.store.audit import AuditLog
from gpuplex.store.keys import ApiKey, KeyRepository

T0 = datetime(2025, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
NO_LIMITS = RateLimits()


def make_key(
    keys: KeyRepository,
    tenant: str = "acme",
    *,
    models: tuple[str, ...] = (),
    expires_at: datetime | None = None,
    limits: RateLimits = NO_LIMITS,
    now: datetime = T0,
) -> tuple[str, ApiKey]:
    return keys.create(tenant, f"{tenant}-key", models, expires_at, limits, now, actor="tester")


def test_create_returns_a_well_formed_key_that_matches_the_stored_hash(engine: Engine) -> None:
    keys = KeyRepository(engine)
    token, key = make_key(
        keys,
        models=("chat", "embed", "chat"),
        limits=RateLimits(requests_per_min=60, tokens_per_min=10_000, concurrent_requests=4),
    )
    assert key_prefix(token) == key.prefix
    assert key.tenant == "acme"
    assert key.models == ("chat", "embed")  # duplicates dropped, order kept
    assert key.limits == RateLimits(
        requests_per_min=60, tokens_per_min=10_000, concurrent_requests=4
    )
    assert key.created_at == T0
    assert key.expires_at is None
    assert key.revoked_at is None
    (record,) = keys.active_records(T0)
    assert record.key == key
    assert key_matches(record.key_hash, token)
    assert not key_matches(record.key_hash, token[:-1] + ("A" if token[-1] != "A" else "B"))


def test_a_keys_limits_are_its_rows_columns_and_come_back_as_given(engine: Engine) -> None:
    keys = KeyRepository(engine)
    limits = RateLimits(tokens_per_min=MAX_TOKENS_PER_MIN, concurrent_requests=1)
    make_key(keys, limits=limits)
    make_key(keys, "globex")
    columns = ", ".join(RateLimits.model_fields)
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT {columns} FROM credentials ORDER BY id")).all()  # noqa: S608
    assert [tuple(row) for row in rows] == [(None, MAX_TOKENS_PER_MIN, 1), (None, None, None)]
    assert [key.limits for key in keys.list()] == [limits, RateLimits()]
    assert [record.key.limits for record in keys.active_records(T0)] == [limits, RateLimits()]


def test_a_key_stored_with_a_limit_past_todays_bound_still_loads(engine: Engine) -> None:
    keys = KeyRepository(engine)
    make_key(keys)
    with engine.begin() as connection:
        connection.execute(text("UPDATE credentials SET requests_per_min = :big"), {"big": 10**13})
    [record] = keys.active_records(T0)
    assert record.key.limits.requests_per_min == 10**13


def test_only_the_hash_is_stored_never_the_secret(engine: Engine) -> None:
    keys = KeyRepository(engine)
    token, key = make_key(keys)
    secret = token.split("_", 2)[2]
    with engine.connect() as connection:
        key_rows = connection.execute(text("SELECT * FROM credentials")).all()
        audit_rows = connection.execute(text("SELECT * FROM audit_log")).all()
    assert len(key_rows) == 1
    stored = " ".join(str(value) for value in key_rows[0])
    assert key_hash(token) in stored
    assert secret not in stored
    assert token not in stored
    audit = " ".join(str(value) for row in audit_rows for value in row)
    assert secret not in audit
    assert key_hash(token) not in audit
    assert key.prefix in audit


def test_list_all_or_one_tenant_oldest_first(engine: Engine) -> None:
    keys = KeyRepository(engine)
    _, first = make_key(keys, "acme")
    _, second = make_key(keys, "globex", now=T0 + timedelta(seconds=1))
    _, third = make_key(keys, "acme", now=T0 + timedelta(seconds=2))
    assert keys.list() == [first, second, third]
    assert keys.list("acme") == [first, third]
    assert keys.list("nobody") == []


def test_revoke_sets_the_time_once_and_is_audited(engine: Engine) -> None:
    keys = KeyRepository(engine)
    _, key = make_key(keys)
    revoked = keys.revoke(key.prefix, T0 + timedelta(minutes=1), actor="alice")
    assert revoked.revoked_at == T0 + timedelta(minutes=1)
    assert revoked.state(T0 + timedelta(minutes=2)) == "revoked"
    again = keys.revoke(key.prefix, T0 + timedelta(minutes=5), actor="bob")
    assert again.revoked_at == T0 + timedelta(minutes=1)  # the first time is kept
    assert keys.active_records(T0 + timedelta(minutes=2)) == []
    entries = AuditLog(engine).entries()
    assert [(e.action, e.actor, e.target) for e in entries] == [
        ("key.create", "tester", f"key:{key.prefix}"),
        ("key.revoke", "alice", f"key:{key.prefix}"),
        ("key.revoke", "bob", f"key:{key.prefix}"),
    ]
    first_time = (T0 + timedelta(minutes=1)).isoformat()
    assert (entries[1].detail["changed"], entries[2].detail["changed"]) == (True, False)
    assert (entries[1].before["revoked_at"], entries[1].after["revoked_at"]) == (None, first_time)
    assert entries[2].before["revoked_at"] == entries[2].after["revoked_at"] == first_time
    assert entries[0].detail["tenant"] == entries[0].after["tenant"] == "acme"
    assert entries[0].before is None


def test_revoking_an_unknown_prefix_is_not_found_and_writes_nothing(engine: Engine) -> None:
    keys = KeyRepository(engine)
    make_key(keys)
    version = keys.version()
    with pytest.raises(NotFoundError, match="no API key with prefix 'deadbeef'"):
        keys.revoke("deadbeef", T0, actor="tester")
    assert keys.version() == version
    assert [e.action for e in AuditLog(engine).entries()] == ["key.create"]


def test_active_records_leave_out_revoked_and_expired_keys(engine: Engine) -> None:
    keys = KeyRepository(engine)
    _, forever = make_key(keys, "a")
    _, expiring = make_key(keys, "b", expires_at=T0 + timedelta(hours=1))
    _, revoked = make_key(keys, "c")
    keys.revoke(revoked.prefix, T0, actor="tester")

    def active_at(at: datetime) -> set[str]:
        return {record.key.prefix for record in keys.active_records(at)}

    assert active_at(T0) == {forever.prefix, expiring.prefix}
    assert active_at(T0 + timedelta(minutes=59, seconds=59)) == {forever.prefix, expiring.prefix}
    assert active_at(T0 + timedelta(hours=1)) == {forever.prefix}  # expiry is exclusive
    assert expiring.state(T0) == "active"
    assert expiring.state(T0 + timedelta(hours=1)) == "expired"
    assert [k.prefix for k in keys.list()] == [forever.prefix, expiring.prefix, revoked.prefix]


def test_version_changes_on_create_and_revoke_only(engine: Engine) -> None:
    keys = KeyRepository(engine)
    seen = [keys.version()]
    _, first = make_key(keys)
    seen.append(keys.version())
    make_key(keys)
    seen.append(keys.version())
    keys.active_records(T0)
    keys.list()
    assert keys.version() == seen[-1]  # reads change nothing
    keys.revoke(first.prefix, T0, actor="tester")
    seen.append(keys.version())
    keys.revoke(first.prefix, T0 + timedelta(seconds=1), actor="tester")
    assert keys.version() == seen[-1]  # a repeated revoke changes no key
    assert len(set(seen)) == len(seen)


def test_revoking_with_an_earlier_clock_still_changes_the_version(engine: Engine) -> None:
    keys = KeyRepository(engine)
    _, first = make_key(keys)
    _, second = make_key(keys)
    keys.revoke(first.prefix, T0 + timedelta(hours=1), actor="tester")
    before = keys.version()
    keys.revoke(second.prefix, T0, actor="tester")  # another host whose clock is behind
    assert keys.version() != before


def test_a_prefix_collision_draws_another_prefix(engine: Engine) -> None:
    prefixes: Iterator[str] = iter(["aaaaaaaa", "aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    keys = KeyRepository(engine, new_prefix=lambda: next(prefixes))
    _, first = make_key(keys)
    token, second = make_key(keys)
    assert (first.prefix, second.prefix) == ("aaaaaaaa", "bbbbbbbb")
    assert key_prefix(token) == "bbbbbbbb"
    assert len(keys.list()) == 2
    assert len(AuditLog(engine).entries()) == 2  # the failed attempts left nothing behind


def test_no_free_prefix_is_a_store_error(engine: Engine) -> None:
    keys = KeyRepository(engine, new_prefix=lambda: "aaaaaaaa")
    make_key(keys)
    with pytest.raises(StoreError, match="no free key prefix"):
        make_key(keys)


def test_datetimes_come_back_aware_utc(engine: Engine) -> None:
    keys = KeyRepository(engine)
    plus_five = timezone(timedelta(hours=5))
    now = T0.astimezone(plus_five)
    _, created = make_key(keys, now=now, expires_at=now + timedelta(days=1))
    keys.revoke(created.prefix, now, actor="tester")
    (key,) = keys.list()
    for at in (created.created_at, key.created_at, key.expires_at, key.revoked_at):
        assert at is not None
        assert at.tzinfo is UTC
    assert key.created_at == T0
    assert key.expires_at == T0 + timedelta(days=1)
    (entry,) = AuditLog(engine).entries("key.revoke")
    assert entry.at.tzinfo is UTC
    assert entry.at == T0


def test_a_naive_time_is_refused(engine: Engine) -> None:
    keys = KeyRepository(engine)
    with pytest.raises(ValueError, match="naive"):
        make_key(keys, now=T0.replace(tzinfo=None))
    assert keys.list() == []
