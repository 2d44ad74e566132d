"""Control-plane API tokens (people and automation calling the REST API; not the gateway's keys).

A token is `gpt_<8 hex prefix>_<secret>`: created once and shown once, stored as its SHA-256 only,
checked in constant time (the same scheme as the gateway's keys, gpuplex.core.serve.keys). A
platform-admin token has no tenant; tenant-admin and tenant-viewer tokens have exactly one.
Every create and revoke appends an audit entry, with the token's tenant, in the same transaction.

A token made by a person, or by a token of a person's chain, records them and works only while
they could make it now (store/credential_grants.py); a suspended one is refused, saying so.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, get_args

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.core.serve.keys import (
    TOKEN_SCHEME,
    key_hash,
    key_matches,
    key_prefix as token_prefix,
)
from gpuplex.errors import CredentialSuspended, NotFoundError, StoreError
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
from gpuplex.store.tables import ApiTokenRow

_NO_SUCH_TOKEN_HASH = "0" * 64  # matches no token: SHA-256 of something is never all zeros
SUSPENDED = (
    "the token is suspended: the person who made it (or made the token that made it) no longer "
    "holds a role that could make it (their groups under auth.oidc.roles); it works again if "
    "they do, and an admin may revoke it"
)
TokenRole = Literal["platform-admin", "tenant-admin", "tenant-viewer"]
TOKEN_ROLES: tuple[TokenRole, ...] = get_args(TokenRole)
TokenState = CredentialState


@dataclass(frozen=True, slots=True)
class ApiToken:
    """What may be shown about a token: everything but the secret and its hash."""

    prefix: str
    name: str
    role: TokenRole
    tenant: str | None  # None for platform-admin
    created_at: datetime  # timezone-aware UTC, as are the others
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    suspended_at: datetime | None = None
    made_by: CredentialMaker | None = None  # None: made by no person and no token

    def state(self, now: datetime) -> TokenState:
        return credential_state(self.revoked_at, self.expires_at, now, self.suspended_at)


@dataclass(frozen=True, slots=True)
class TokenIdentity:
    """Who a valid token speaks for."""

    prefix: str
    name: str
    role: TokenRole
    tenant: str | None


class TokenRepository:
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
        name: str,
        role: TokenRole,
        tenant: str | None,
        expires_at: datetime | None,
        now: datetime,
        actor: str,
        made_by: CredentialMaker | None = None,
    ) -> tuple[str, ApiToken]:
        """A new token: (the token string, to show once; what is stored about it). `made_by`:
        the person or token that makes it (a token of a person's chain passes its person on)."""
        _check_role(role, tenant)
        now = aware_utc(now)
        expires_at = aware_utc(expires_at) if expires_at is not None else None

        def insert(session: Session, prefix: str, token: str) -> ApiToken:
            maker = maker_in_chain(session, made_by)
            row = ApiTokenRow(
                prefix=prefix,
                token_hash=key_hash(token),
                name=name,
                role=role,
                tenant=tenant,
                created_at=now,
                created_by=actor,
                expires_at=expires_at,
                revoked_at=None,
                **(maker.columns() if maker is not None else {}),
            )
            session.add(row)
            session.flush()  # the insert first: it takes the write lock
            audit_credential(session, row, "create", now=now, actor=actor, before=None)
            judge_new(session, row, now, actor)
            return _token(row)

        return issue(
            self._engine, TOKEN_SCHEME, "token", insert, self._new_prefix, self._new_secret
        )

    def list(self, tenant: str | None = None) -> builtins.list[ApiToken]:
        """Every token (of one tenant, if given), oldest first, revoked and expired ones included."""
        query = select(ApiTokenRow).order_by(ApiTokenRow.id)
        if tenant is not None:
            query = query.where(ApiTokenRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [_token(row) for row in session.scalars(query)]

    def get(self, prefix: str) -> ApiToken | None:
        query = select(ApiTokenRow).where(ApiTokenRow.prefix == prefix)
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.scalars(query).first()
            return _token(row) if row is not None else None

    def revoke(self, prefix: str, now: datetime, actor: str) -> ApiToken:
        """Revoke a token by its prefix. Revoking a revoked token changes nothing but the audit log."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            row, changed = mark_revoked(session, ApiTokenRow, prefix, now)
            if row is None:
                raise NotFoundError(
                    f"no control-plane token with prefix {prefix!r}; list the tokens to see "
                    "their prefixes"
                )
            after = shown_credential(row)
            before = after | {"revoked_at": None} if changed else after
            audit_credential(
                session, row, "revoke", now=now, actor=actor, before=before, changed=changed
            )
            return _token(row)

    def authenticate(self, token: str, now: datetime) -> TokenIdentity | None:
        """Who `token` speaks for at `now`; None when it is malformed, unknown, revoked or
        expired. The stored hash is compared in constant time. Raises CredentialSuspended for
        the token itself while it is suspended (after the hash matched: nobody learns of another
        token's state)."""
        prefix = token_prefix(token, TOKEN_SCHEME)
        if prefix is None:
            return None
        query = select(ApiTokenRow).where(ApiTokenRow.prefix == prefix)
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.scalars(query).first()
            # an unknown prefix costs the same hash and comparison as a wrong secret
            stored_hash = row.token_hash if row is not None else _NO_SUCH_TOKEN_HASH
            if not key_matches(stored_hash, token) or row is None:
                return None
            found = _token(row)
        state = found.state(aware_utc(now))
        if state == "suspended":
            raise CredentialSuspended(SUSPENDED)
        if state != "active":
            return None
        return TokenIdentity(found.prefix, found.name, found.role, found.tenant)


def _check_role(role: str, tenant: str | None) -> None:
    if role not in TOKEN_ROLES:
        raise ValueError(f"unknown role {role!r}: use one of {', '.join(TOKEN_ROLES)}")
    if role == "platform-admin" and tenant is not None:
        raise ValueError("a platform-admin token has no tenant: leave the tenant out")
    if role != "platform-admin" and not tenant:
        raise ValueError(f"a {role} token needs the tenant it acts for")


def _role(row: ApiTokenRow) -> TokenRole:
    for role in TOKEN_ROLES:
        if row.role == role:
            return role
    raise StoreError(f"token {row.prefix} has the unknown role {row.role!r}: revoke it")


def _token(row: ApiTokenRow) -> ApiToken:
    return ApiToken(
        prefix=row.prefix,
        name=row.name,
        role=_role(row),
        tenant=row.tenant,
        created_at=row.created_at,
        created_by=row.created_by,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        suspended_at=row.suspended_at,
        made_by=maker_of(row),
    )
