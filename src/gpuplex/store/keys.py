"""API keys in the store: the gateway's face of the one credential repository
(credential_repository.py, kind "key"). Create (the secret is returned once and only its hash is
kept), list, revoke, and what the gateway needs: the active keys with their hashes, and a cheap
version that changes whenever a key is created, revoked, suspended or resumed.

Every create and revoke appends an audit entry in the same transaction. A key made by a person,
or by a token of a person's chain, records them and is served only while they could make it now
(store/credential_grants.py): a suspended key is not among the active ones.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine

from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.errors import StoreError
from gpuplex.store import credentials
from gpuplex.store.credential_repository import Credentials
from gpuplex.store.credentials import (
    CredentialMaker,
    CredentialState,
    credential_state,
    maker_of,
)
from gpuplex.store.tables import CredentialRow

KeyState = CredentialState


@dataclass(frozen=True, slots=True)
class ApiKey:
    """What may be shown about a key: everything but the secret and its hash."""

    prefix: str
    tenant: str
    name: str
    models: tuple[str, ...]  # empty: every model of the tenant
    created_at: datetime  # timezone-aware UTC, as are the others
    expires_at: datetime | None
    revoked_at: datetime | None
    limits: RateLimits  # the key's own, on top of its tenant's
    suspended_at: datetime | None = None
    made_by: CredentialMaker | None = None  # None: made by no person and no token

    def state(self, now: datetime) -> KeyState:
        return credential_state(self.revoked_at, self.expires_at, now, self.suspended_at)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """An active key with its stored hash, for the gateway's in-memory cache."""

    key: ApiKey
    key_hash: str


class KeyRepository:
    def __init__(
        self,
        engine: Engine,
        *,
        new_prefix: Callable[[], str] = credentials.new_prefix,
        new_secret: Callable[[], str] = credentials.new_secret,
    ) -> None:
        self._keys = Credentials(
            engine, "key", _api_key, new_prefix=new_prefix, new_secret=new_secret
        )

    def create(
        self,
        tenant: str,
        name: str,
        models: Sequence[str],
        expires_at: datetime | None,
        limits: RateLimits,
        now: datetime,
        actor: str,
        made_by: CredentialMaker | None = None,
    ) -> tuple[str, ApiKey]:
        """A new key: (the key string, to show once; what is stored about it). `made_by`: the
        person or token that makes it (a token of a person's chain passes its person on)."""
        return self._keys.issue(
            tenant=tenant,
            name=name,
            expires_at=expires_at,
            now=now,
            actor=actor,
            made_by=made_by,
            carries={"models": list(dict.fromkeys(models)), **limit_columns(limits)},
        )

    def list(self, tenant: str | None = None) -> builtins.list[ApiKey]:
        """Every key (of one tenant, if given), oldest first, revoked and expired ones included."""
        return self._keys.list(tenant)

    def revoke(self, prefix: str, now: datetime, actor: str) -> ApiKey:
        """Revoke a key by its prefix. Revoking a revoked key changes nothing but the audit log."""
        return self._keys.revoke(prefix, now, actor)

    def active_records(self, now: datetime) -> builtins.list[KeyRecord]:
        """The keys that work at `now` (not revoked, suspended or expired), with their stored
        hashes, oldest first."""
        return [KeyRecord(key, stored_hash) for key, stored_hash in self._keys.active(now)]

    def version(self) -> str:
        """Changes whenever a key is created, revoked, suspended or resumed (one small aggregate
        query, cheap enough to poll twice a second from every gateway worker)."""
        return self._keys.version()


def _api_key(row: CredentialRow) -> ApiKey:
    return ApiKey(
        prefix=row.prefix,
        tenant=_tenant(row),
        name=row.name,
        models=tuple(row.models or ()),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        limits=row_limits(row),
        suspended_at=row.suspended_at,
        made_by=maker_of(row),
    )


def _tenant(row: CredentialRow) -> str:
    if row.tenant is None:
        raise StoreError(f"key {row.prefix} has no tenant: revoke it")
    return row.tenant


def limit_columns(limits: RateLimits) -> dict[str, int | None]:
    """The `credentials` columns that hold a key's limits: one per `RateLimits` field, same name."""
    return limits.model_dump()


def row_limits(row: CredentialRow) -> RateLimits:
    """A key's limits from its row; not checked again (a key made before a bound existed still
    loads, and the gateway reads every key at every change)."""
    return RateLimits.model_construct(
        **{name: getattr(row, name) for name in RateLimits.model_fields}
    )
