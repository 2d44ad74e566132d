"""Revision 0014 moves API keys and control-plane tokens into one table, on SQLite and PostgreSQL.

The store before it is written the way a gpuplex of revision 0013 left it (rows put into
`api_keys` and `api_tokens` by SQL, with hashes made here by hashlib, not by gpuplex), in every
state a credential can be in. After the upgrade each key and token is what it was, every secret
still works, and a key and a token that share a prefix stay two credentials: revoking one leaves
the other. The downgrade gives back the rows exactly as they were."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from gpuplex.core.spec import RateLimits
from gpuplex.store.audit import verify_audit
from gpuplex.store.credentials import CredentialMaker
from gpuplex.store.keys import KeyRepository
from gpuplex.store.migrate import HEAD_REVISION, downgrade_store, store_revision, upgrade_store
from gpuplex.store.tokens import TokenIdentity, TokenRepository

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
LATER = T0 + timedelta(days=1)
SHARED_PREFIX = "0123abcd"
MAKER_PREFIX = "bbbb0002"
ISSUER = "https://idp.example"


def secret(n: int) -> str:
    return f"s{n:03d}" + "x" * 44


def sha256(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


KEYS: list[dict[str, Any]] = [
    {  # limits, models, an expiry to come
        "prefix": "aaaa0001",
        "tenant": "acme",
        "name": "web",
        "models": ["llama", "mistral"],
        "expires_at": T0 + timedelta(days=30),
        "revoked_at": None,
        "requests_per_min": 60,
        "tokens_per_min": 10_000,
        "concurrent_requests": None,
    },
    {"prefix": "aaaa0002", "tenant": "acme", "name": "old", "revoked_at": T0},
    {"prefix": "aaaa0003", "tenant": "globex", "name": "gone", "expires_at": T0},
    {  # made by a person's token chain, suspended since the person lost the grant
        "prefix": "aaaa0004",
        "tenant": "globex",
        "name": "ci",
        "made_by_token": MAKER_PREFIX,
        "creator_issuer": ISSUER,
        "creator_subject": "alice",
        "grant_role": "tenant-admin",
        "grant_tenant": "globex",
        "grant_groups": ["globex-admins"],
        "suspended_at": T0,
        "suspension_changes": 1,
    },
    {"prefix": SHARED_PREFIX, "tenant": "initech", "name": "twin"},
]
TOKENS: list[dict[str, Any]] = [
    {"prefix": "bbbb0001", "name": "ops", "role": "platform-admin", "tenant": None},
    {
        "prefix": "bbbb0002",
        "name": "alice-ci",
        "role": "tenant-admin",
        "tenant": "globex",
        "creator_issuer": ISSUER,
        "creator_subject": "alice",
        "grant_role": "tenant-admin",
        "grant_tenant": "globex",
        "grant_groups": ["globex-admins"],
    },
    {"prefix": "bbbb0003", "name": "viewer", "role": "tenant-viewer", "tenant": "acme"},
    {"prefix": SHARED_PREFIX, "name": "twin", "role": "tenant-viewer", "tenant": "initech"},
]
KEY_DEFAULTS: dict[str, Any] = {
    "models": [],
    "expires_at": None,
    "revoked_at": None,
    "requests_per_min": None,
    "tokens_per_min": None,
    "concurrent_requests": None,
}
MAKER_DEFAULTS: dict[str, Any] = {
    "made_by_token": None,
    "creator_issuer": None,
    "creator_subject": None,
    "grant_role": None,
    "grant_tenant": None,
    "grant_groups": None,
    "suspended_at": None,
    "suspension_changes": 0,
}
TOKEN_DEFAULTS: dict[str, Any] = {"expires_at": None, "revoked_at": None, "created_by": "root"}


def key_string(n: int, prefix: str) -> str:
    return f"gpx_{prefix}_{secret(n)}"


def token_string(n: int, prefix: str) -> str:
    return f"gpt_{prefix}_{secret(100 + n)}"


def old_rows(
    defaults: dict[str, Any],
    specs: list[dict[str, Any]],
    hash_column: str,
    secret: Callable[[int, str], str],
) -> list[dict[str, Any]]:
    """The rows of one of revision 0013's tables (`api_keys` or `api_tokens`), oldest first."""
    return [
        defaults
        | MAKER_DEFAULTS
        | spec
        | {"id": n + 1, hash_column: sha256(secret(n, spec["prefix"])), "created_at": T0}
        for n, spec in enumerate(specs)
    ]


def key_rows() -> list[dict[str, Any]]:
    return old_rows(KEY_DEFAULTS, KEYS, "key_hash", key_string)


def token_rows() -> list[dict[str, Any]]:
    return old_rows(TOKEN_DEFAULTS, TOKENS, "token_hash", token_string)


def insert(engine: Engine, table: str, rows: list[dict[str, Any]]) -> None:
    json_columns = {"models", "grant_groups"}
    with engine.begin() as connection:
        for row in rows:
            values = {
                name: json.dumps(value) if name in json_columns and value is not None else value
                for name, value in row.items()
            }
            names = ", ".join(values)
            marks = ", ".join(f":{name}" for name in values)
            connection.execute(text(f"INSERT INTO {table} ({names}) VALUES ({marks})"), values)  # noqa: S608


def read(engine: Engine, table: str) -> list[dict[str, Any]]:
    """Every row, oldest first, with JSON decoded and times aware UTC (SQLite gives them back as
    naive text, PostgreSQL as aware datetimes)."""
    with engine.connect() as connection:
        rows = connection.execute(text(f"SELECT * FROM {table} ORDER BY id")).mappings().all()  # noqa: S608
    return [{name: _plain(name, value) for name, value in row.items()} for row in rows]


def _plain(name: str, value: Any) -> Any:
    if value is None:
        return None
    if name in {"models", "grant_groups"} and isinstance(value, str):
        return json.loads(value)
    if name.endswith("_at"):
        at = datetime.fromisoformat(value) if isinstance(value, str) else value
        return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return value


def a_store_at_0013(engine: Engine) -> None:
    downgrade_store(engine, "0013")
    insert(engine, "api_keys", key_rows())
    insert(engine, "api_tokens", token_rows())


def test_every_key_and_token_is_what_it_was_and_every_secret_still_works(engine: Engine) -> None:
    a_store_at_0013(engine)
    upgrade_store(engine)
    assert store_revision(engine) == HEAD_REVISION
    keys, tokens = KeyRepository(engine), TokenRepository(engine)

    listed = keys.list()
    assert [key.prefix for key in listed] == [key["prefix"] for key in KEYS]
    web = listed[0]
    assert (web.tenant, web.name, web.models) == ("acme", "web", ("llama", "mistral"))
    assert web.limits == RateLimits(requests_per_min=60, tokens_per_min=10_000)
    assert web.expires_at == T0 + timedelta(days=30)
    assert [key.state(LATER) for key in listed] == [
        "active",
        "revoked",
        "expired",
        "suspended",
        "active",
    ]
    assert listed[3].made_by == CredentialMaker(
        token_prefix=MAKER_PREFIX,
        issuer=ISSUER,
        subject="alice",
        grant_role="tenant-admin",
        grant_tenant="globex",
        grant_groups=("globex-admins",),
    )
    served = {record.key.prefix: record.key_hash for record in keys.active_records(LATER)}
    assert served == {
        "aaaa0001": sha256(key_string(0, "aaaa0001")),
        SHARED_PREFIX: sha256(key_string(4, SHARED_PREFIX)),
    }

    assert [(t.prefix, t.role, t.tenant, t.created_by) for t in tokens.list()] == [
        (t["prefix"], t["role"], t["tenant"], "root") for t in TOKENS
    ]
    for n, token in enumerate(TOKENS):
        assert tokens.authenticate(token_string(n, token["prefix"]), LATER) == TokenIdentity(
            token["prefix"], token["name"], token["role"], token["tenant"]
        )
    # a key's secret is no token, even where a token has the key's prefix
    assert tokens.authenticate(key_string(4, SHARED_PREFIX).replace("gpx", "gpt"), LATER) is None


def test_a_key_and_a_token_with_one_prefix_stay_two_credentials(engine: Engine) -> None:
    a_store_at_0013(engine)
    upgrade_store(engine)
    keys, tokens = KeyRepository(engine), TokenRepository(engine)
    key_version = keys.version()

    tokens.revoke(SHARED_PREFIX, LATER, "root")

    assert keys.version() == key_version  # the gateway's keys did not change
    assert SHARED_PREFIX in {record.key.prefix for record in keys.active_records(LATER)}
    assert tokens.authenticate(token_string(3, SHARED_PREFIX), LATER) is None
    keys.revoke(SHARED_PREFIX, LATER, "root")
    assert SHARED_PREFIX not in {record.key.prefix for record in keys.active_records(LATER)}
    assert verify_audit(engine).ok


def test_the_downgrade_gives_back_the_rows_as_they_were(engine: Engine) -> None:
    a_store_at_0013(engine)
    upgrade_store(engine)
    downgrade_store(engine, "0013")
    assert read(engine, "api_keys") == key_rows()
    assert read(engine, "api_tokens") == token_rows()
    upgrade_store(engine)
    assert len(KeyRepository(engine).list()) == len(KEYS)
    assert len(TokenRepository(engine).list()) == len(TOKENS)


def test_what_a_token_makes_follows_that_tokens_person_not_a_key_of_its_prefix(
    engine: Engine,
) -> None:
    """The making token is found by its prefix among tokens only: a key made earlier with the
    same prefix, by nobody, must not be taken for it (the new key would then follow nobody)."""
    KeyRepository(engine, new_prefix=lambda: SHARED_PREFIX).create(
        "initech", "twin", [], None, RateLimits(), T0, "root"
    )
    alice = CredentialMaker(
        issuer=ISSUER,
        subject="alice",
        grant_role="tenant-admin",
        grant_tenant="initech",
        grant_groups=("initech-admins",),
    )
    TokenRepository(engine, new_prefix=lambda: SHARED_PREFIX).create(
        "alice-ci", "tenant-admin", "initech", None, T0, "alice", made_by=alice
    )
    _, made = KeyRepository(engine).create(
        "initech",
        "made-by-token",
        [],
        None,
        RateLimits(),
        T0,
        "token alice-ci",
        made_by=CredentialMaker(token_prefix=SHARED_PREFIX),
    )
    assert made.made_by is not None
    assert (made.made_by.token_prefix, made.made_by.subject) == (SHARED_PREFIX, "alice")
