"""A service account of a tenant calling the gateway with the identity provider's access token (the
client credentials grant), as pure decisions: which tenant a verified token's claims name, the
identity its usage is metered under, and how long a verified token is remembered.

The identity stands where an API key's prefix stands (usage records, per-key roll-ups): `sa-` and
the first 13 hex digits of SHA-256 over `<issuer>\\n<subject>` (16 characters, the column's width),
the same for every token of one account at one issuer, and never one of an API key's 8-character
prefixes.

Verified tokens are remembered by the SHA-256 of the token (the token itself is never kept), each
until the earlier of its `exp` and a short time to live, in a bounded table: the oldest entries are
dropped first, so a flood of distinct tokens costs memory up to the bound and no more.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

#: How a service account's identity starts (an API key's prefix is 8 of [0-9a-z], no dash).
ACCOUNT_PREFIX = "sa-"
_ACCOUNT_DIGITS = 13
#: A verified token is checked again at least this often (a tenant's removal, a spec change).
VERIFIED_TTL_S = 60.0
MAX_VERIFIED_TOKENS = 10_000


def account_prefix(issuer: str, subject: str) -> str:
    """The identity a service account's usage goes by (see the module's docstring)."""
    digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
    return ACCOUNT_PREFIX + digest[:_ACCOUNT_DIGITS]


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tenant_of(claims: Mapping[str, Any], tenant_claim: str, tenants: Collection[str]) -> str | None:
    """The tenant the claim names, when it is a string naming a tenant of `tenants`; else None."""
    value = claims.get(tenant_claim)
    return value if isinstance(value, str) and value in tenants else None


@dataclass(frozen=True, slots=True)
class ServiceAccount:
    """A verified token's caller: the settings it was verified under, its tenant and identity."""

    verified_by: tuple[str, str, str]  # (issuer, audience, tenant claim)
    tenant: str
    subject: str
    prefix: str
    expires_at_s: float


def remember_until(expires_at_s: float, now_s: float, ttl_s: float = VERIFIED_TTL_S) -> float:
    return min(expires_at_s, now_s + ttl_s)


@dataclass(slots=True)
class VerifiedTokens:
    """Token digest -> (the account, until when it is taken without verifying again)."""

    max_entries: int = MAX_VERIFIED_TOKENS
    _entries: OrderedDict[str, tuple[ServiceAccount, float]] = field(
        default_factory=OrderedDict, repr=False
    )

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: str, now_s: float) -> ServiceAccount | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[1] <= now_s:
            del self._entries[digest]
            return None
        return entry[0]

    def put(self, digest: str, account: ServiceAccount, now_s: float, ttl_s: float) -> None:
        until = remember_until(account.expires_at_s, now_s, ttl_s)
        if until <= now_s:
            return
        self._entries[digest] = (account, until)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
