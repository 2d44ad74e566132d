"""A service account's pure pieces: its identity (stable per issuer and subject, the width of a
key prefix column, never an API key's prefix), the tenant its claim names (a string naming a tenant
of the revision, nothing else), and the table of verified tokens (each kept until the earlier of
its expiry and the time to live, the oldest dropped past the bound)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.keys import PREFIX_CHARS
from gpuplex.core.serve.service_accounts import (
    ServiceAccount,
    VerifiedTokens,
    account_prefix,
    remember_until,
    tenant_of,
    token_digest,
)

ISSUER = "https://login.example.com/realms/acme"
SETTINGS = (ISSUER, "urn:gpuplex:gateway", "gpuplex_tenant")


@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
def test_an_accounts_identity_fits_the_key_prefix_column_and_is_no_keys_prefix(
    issuer: str, subject: str
) -> None:
    identity = account_prefix(issuer, subject)
    assert re.fullmatch(r"sa-[0-9a-f]{13}", identity)
    assert len(identity) == 16  # usage_records.key_prefix is String(16)
    assert len(identity) != PREFIX_CHARS
    assert identity == account_prefix(issuer, subject)


def test_the_identity_is_per_subject_and_per_issuer() -> None:
    ids = {
        account_prefix(ISSUER, "svc-ci"),
        account_prefix(ISSUER, "svc-batch"),
        account_prefix("https://other.example.com", "svc-ci"),
        account_prefix(ISSUER + "\nsvc", "ci"),  # the separator keeps the parts apart
    }
    assert len(ids) == 4


@pytest.mark.parametrize(
    ("claims", "tenant"),
    [
        ({"gpuplex_tenant": "acme"}, "acme"),
        ({"gpuplex_tenant": "initech"}, None),  # no such tenant
        ({}, None),
        ({"gpuplex_tenant": ["acme"]}, None),  # a list is not a tenant
        ({"gpuplex_tenant": None}, None),
        ({"tenant": "acme"}, None),  # another claim
    ],
)
def test_the_tenant_claim_must_name_a_tenant_of_the_revision(
    claims: dict[str, Any], tenant: str | None
) -> None:
    assert tenant_of(claims, "gpuplex_tenant", {"acme", "globex"}) == tenant


def account(expires_at_s: float = 1_000.0, tenant: str = "acme") -> ServiceAccount:
    return ServiceAccount(
        SETTINGS, tenant, "svc-ci", account_prefix(ISSUER, "svc-ci"), expires_at_s
    )


@pytest.mark.parametrize(
    ("expires", "now", "ttl", "until"),
    [(1_000.0, 0.0, 60.0, 60.0), (1_000.0, 990.0, 60.0, 1_000.0), (10.0, 20.0, 60.0, 10.0)],
)
def test_a_token_is_remembered_until_its_expiry_or_the_ttl_whichever_is_first(
    expires: float, now: float, ttl: float, until: float
) -> None:
    assert remember_until(expires, now, ttl) == until


def test_verified_tokens_expire_and_an_expired_token_is_never_kept() -> None:
    table = VerifiedTokens()
    digest = token_digest("a.b.c")
    assert digest != "a.b.c"
    assert len(digest) == 64
    table.put(digest, account(expires_at_s=100.0), now_s=0.0, ttl_s=60.0)
    assert table.get(digest, 59.9) == account(expires_at_s=100.0)
    assert table.get(digest, 60.0) is None  # the TTL is up: verify it again
    assert len(table) == 0
    table.put(digest, account(expires_at_s=100.0), now_s=90.0, ttl_s=60.0)
    assert table.get(digest, 99.9) is not None
    assert table.get(digest, 100.0) is None  # expired
    table.put(digest, account(expires_at_s=100.0), now_s=100.0, ttl_s=60.0)
    assert len(table) == 0


def test_verified_tokens_are_bounded_dropping_the_oldest() -> None:
    table = VerifiedTokens(max_entries=3)
    for n in range(5):
        table.put(f"d{n}", account(), now_s=0.0, ttl_s=60.0)
    assert len(table) == 3
    assert [table.get(f"d{n}", 1.0) is not None for n in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
