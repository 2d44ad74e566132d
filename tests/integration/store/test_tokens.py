"""Control-plane tokens on SQLite and PostgreSQL: create (shown once, stored hashed), list, revoke,
authenticate (wrong, revoked, expired and malformed tokens, and gateway keys, are refused), the
role and tenant rules, and the audit entries."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from gpuplex.core.serve.keys import key_hash, key_prefix
from gpuplex.core.spec import RateLimits
from gpuplex.errors import NotFoundError, StoreError
from gpuplex.store.audit import AuditLog
from gpuplex.store.keys import KeyRepository
from gpuplex.store.tokens import TokenIdentity, TokenRepository

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_a_new_token_authenticates_as_its_role_and_tenant(engine: Engine) -> None:
    tokens = TokenRepository(engine)
    token, created = tokens.create("acme-ci", "tenant-admin", "acme", None, T0, "root")
    assert token.startswith(f"gpt_{created.prefix}_")
    assert key_prefix(token, "gpt") == created.prefix
    assert key_prefix(token) is None  # not a gateway key
    assert (created.role, created.tenant, created.created_by) == ("tenant-admin", "acme", "root")
    assert tokens.authenticate(token, T0) == TokenIdentity(
        created.prefix, "acme-ci", "tenant-admin", "acme"
    )
    assert tokens.list() == [created]
    assert tokens.get(created.prefix) == created


def test_wrong_malformed_and_gateway_tokens_are_refused(engine: Engine) -> None:
    tokens = TokenRepository(engine)
    token, created = tokens.create("ops", "platform-admin", None, None, T0, "root")
    gateway_key, _ = KeyRepository(engine).create("acme", "", [], None, RateLimits(), T0, "root")
    last = token[-1]
    wrong_secret = token[:-1] + ("A" if last != "A" else "B")
    unknown_prefix = token.replace(
        created.prefix, "0" * 8 if created.prefix != "0" * 8 else "1" * 8
    )
    for refused in (wrong_secret, unknown_prefix, "", "gpt_", token + "x" * 80, gateway_key):
        assert tokens.authenticate(refused, T0) is None, refused
    assert tokens.authenticate(token, T0) is not None


def test_revoked_and_expired_tokens_are_refused(engine: Engine) -> None:
    tokens = TokenRepository(engine)
    revoked, revoked_info = tokens.create("a", "tenant-viewer", "acme", None, T0, "root")
    expiring, _ = tokens.create("b", "tenant-viewer", "acme", T0 + timedelta(hours=1), T0, "root")
    tokens.revoke(revoked_info.prefix, T0 + timedelta(minutes=1), "root")
    assert tokens.authenticate(revoked, T0 + timedelta(minutes=2)) is None
    assert tokens.authenticate(expiring, T0 + timedelta(minutes=59)) is not None
    assert tokens.authenticate(expiring, T0 + timedelta(hours=1)) is None  # expiry is exclusive
    states = [t.state(T0 + timedelta(hours=2)) for t in tokens.list()]
    assert states == ["revoked", "expired"]


def test_revoke_is_audited_with_the_tenant_and_repeats_harmlessly(engine: Engine) -> None:
    tokens = TokenRepository(engine)
    _, created = tokens.create("a", "tenant-admin", "acme", None, T0, "root")
    first = tokens.revoke(created.prefix, T0 + timedelta(minutes=1), "alice")
    again = tokens.revoke(created.prefix, T0 + timedelta(minutes=5), "bob")
    assert first.revoked_at == again.revoked_at == T0 + timedelta(minutes=1)
    create, revoke, repeat = AuditLog(engine).entries()
    assert (create.action, create.tenant, create.target) == (
        "token.create",
        "acme",
        f"token:{created.prefix}",
    )
    assert create.after["role"] == "tenant-admin"
    assert (revoke.action, revoke.actor, revoke.tenant) == ("token.revoke", "alice", "acme")
    assert revoke.before["revoked_at"] is None
    assert revoke.after["revoked_at"] == (T0 + timedelta(minutes=1)).isoformat()
    assert revoke.detail["changed"] is True
    assert repeat.detail["changed"] is False


def test_revoking_an_unknown_prefix_is_not_found(engine: Engine) -> None:
    with pytest.raises(NotFoundError, match="no control-plane token with prefix 'deadbeef'"):
        TokenRepository(engine).revoke("deadbeef", T0, "root")
    assert AuditLog(engine).entries() == []


def test_only_the_hash_is_stored(engine: Engine) -> None:
    token, _ = TokenRepository(engine).create("a", "tenant-admin", "acme", None, T0, "root")
    with engine.connect() as connection:
        stored = " ".join(
            str(value)
            for table in ("credentials", "audit_log")
            for row in connection.execute(text(f"SELECT * FROM {table}"))  # noqa: S608
            for value in row
        )
    assert key_hash(token) in stored
    assert token.split("_", 2)[2] not in stored


def test_list_filters_by_tenant(engine: Engine) -> None:
    tokens = TokenRepository(engine)
    _, ops = tokens.create("ops", "platform-admin", None, None, T0, "root")
    _, acme = tokens.create("a", "tenant-admin", "acme", None, T0, "root")
    _, globex = tokens.create("g", "tenant-viewer", "globex", None, T0, "root")
    assert tokens.list() == [ops, acme, globex]
    assert tokens.list("acme") == [acme]


@pytest.mark.parametrize(
    ("role", "tenant", "says"),
    [
        ("platform-admin", "acme", "has no tenant"),
        ("tenant-admin", None, "needs the tenant"),
        ("tenant-viewer", "", "needs the tenant"),
        ("superuser", None, "unknown role"),
    ],
)
def test_role_and_tenant_must_agree(
    engine: Engine, role: str, tenant: str | None, says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        TokenRepository(engine).create("x", role, tenant, None, T0, "root")  # type: ignore[arg-type]
    assert TokenRepository(engine).list() == []


def test_a_prefix_collision_draws_another_and_no_free_prefix_is_a_store_error(
    engine: Engine,
) -> None:
    prefixes: Iterator[str] = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb"])
    tokens = TokenRepository(engine, new_prefix=lambda: next(prefixes))
    tokens.create("a", "platform-admin", None, None, T0, "root")
    _, second = tokens.create("b", "platform-admin", None, None, T0, "root")
    assert second.prefix == "bbbbbbbb"
    stuck = TokenRepository(engine, new_prefix=lambda: "aaaaaaaa")
    with pytest.raises(StoreError, match="no free token prefix"):
        stuck.create("c", "platform-admin", None, None, T0, "root")
    assert len(AuditLog(engine).entries()) == 2
