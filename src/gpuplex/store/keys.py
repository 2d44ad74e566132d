"""API keys in the store: create (the secret is returned once and only its hash is kept), list,
revoke, and what the gateway needs: the active keys with their hashes, and a cheap version that
changes whenever a key is created, revoked, suspended or resumed.

Every create and revoke appends an audit entry in the same transaction. A key made by a person,
or by a token of a person's chain, records them and is served only while they could make it now
(store/credential_grants.py): a suspended key is not among the active ones.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, or_, select
from sqlalchemy.orm import Session

from gpuplex.core.serve.keys import KEY_SCHEME, key_hash
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.errors import NotFoundError
from gpuplex.store import credentials
from gpuplex.store.columns import aware_utc
from gpuplex.store.credential_grants import judge_new, maker_in_chain
from gpuplex.store.credentials import (
    CredentialMaker,
    CredentialState,
    audit_credential,
    credential_state,
    issue,
    maker_of,
    mark_revoked,
    shown_credential,
)
from gpuplex.store.db import store_errors
from gpuplex.store.tables import ApiKeyRow

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
        self._engine = engine
        self._new_prefix = new_prefix
        self._new_secret = new_secret

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
        now = aware_utc(now)
        expires_at = aware_utc(expires_at) if expires_at is not None else None

        def insert(session: Session, prefix: str, token: str) -> ApiKey:
            maker = maker_in_chain(session, made_by)
            row = ApiKeyRow(
                prefix=prefix,
                key_hash=key_hash(token),
                tenant=tenant,
                name=name,
                models=list(dict.fromkeys(models)),
                created_at=now,
                expires_at=expires_at,
                revoked_at=None,
                **limit_columns(limits),
                **(maker.columns() if maker is not None else {}),
            )
            session.add(row)
            session.flush()  # the insert first: it takes the write lock
            audit_credential(session, row, "create", now=now, actor=actor, before=None)
            judge_new(session, row, now, actor)
            return _api_key(row)

        return issue(self._engine, KEY_SCHEME, "key", insert, self._new_prefix, self._new_secret)

    def list(self, tenant: str | None = None) -> builtins.list[ApiKey]:
        """Every key (of one tenant, if given), oldest first, revoked and expired ones included."""
        query = select(ApiKeyRow).order_by(ApiKeyRow.id)
        if tenant is not None:
            query = query.where(ApiKeyRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_api_key(row) for row in session.scalars(query)]

    def revoke(self, prefix: str, now: datetime, actor: str) -> ApiKey:
        """Revoke a key by its prefix. Revoking a revoked key changes nothing but the audit log."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            row, changed = mark_revoked(session, ApiKeyRow, prefix, now)
            if row is None:
                raise NotFoundError(
                    f"no API key with prefix {prefix!r}; `gpuplex keys list` shows the prefixes"
                )
            after = shown_credential(row)
            before = after | {"revoked_at": None} if changed else after
            audit_credential(
                session, row, "revoke", now=now, actor=actor, before=before, changed=changed
            )
            return _api_key(row)

    def active_records(self, now: datetime) -> builtins.list[KeyRecord]:
        """The keys that work at `now` (not revoked, suspended or expired), with their stored
        hashes."""
        query = select(ApiKeyRow).where(
            ApiKeyRow.revoked_at.is_(None),
            ApiKeyRow.suspended_at.is_(None),
            or_(ApiKeyRow.expires_at.is_(None), ApiKeyRow.expires_at > now),
        )
        with store_errors(self._engine), Session(self._engine) as session:
            return [KeyRecord(_api_key(row), row.key_hash) for row in session.scalars(query)]

    def version(self) -> str:
        """Changes whenever a key is created, revoked, suspended or resumed: one small aggregate
        query, cheap enough to poll twice a second from every gateway worker. (Keys are never
        deleted, revocation is one-way, and each suspension or resumption adds one to its key's
        `suspension_changes`, so all four figures only grow.)"""
        query = select(
            func.count(ApiKeyRow.id),
            func.max(ApiKeyRow.id),
            func.count(ApiKeyRow.revoked_at),
            func.coalesce(func.sum(ApiKeyRow.suspension_changes), 0),
        )
        with store_errors(self._engine), self._engine.connect() as connection:
            count, max_id, revoked, suspensions = connection.execute(query).one()
        return f"{count}.{max_id or 0}.{revoked}.{suspensions}"


def _api_key(row: ApiKeyRow) -> ApiKey:
    return ApiKey(
        prefix=row.prefix,
        tenant=row.tenant,
        name=row.name,
        models=tuple(row.models),
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        limits=row_limits(row),
        suspended_at=row.suspended_at,
        made_by=maker_of(row),
    )


def limit_columns(limits: RateLimits) -> dict[str, int | None]:
    """The `api_keys` columns that hold a key's limits: one per `RateLimits` field, same name."""
    return limits.model_dump()


def row_limits(row: ApiKeyRow) -> RateLimits:
    """A key's limits from its row; not checked again (a key made before a bound existed still
    loads, and the gateway reads every key at every change)."""
    return RateLimits.model_construct(
        **{name: getattr(row, name) for name in RateLimits.model_fields}
    )
