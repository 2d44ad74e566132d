"""Control-plane API tokens (people and automation calling the REST API; not the gateway's keys):
the control plane's face of the one credential repository (credential_repository.py, kind
"token").

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

from sqlalchemy import Engine

from gpuplex.core.serve.keys import (
    TOKEN_SCHEME,
    key_matches,
    key_prefix as token_prefix,
)
from gpuplex.errors import CredentialSuspended, StoreError
from gpuplex.store import credentials
from gpuplex.store.columns import aware_utc
from gpuplex.store.credential_repository import Credentials
from gpuplex.store.credentials import (
    CredentialMaker,
    CredentialState,
    credential_state,
    maker_of,
)
from gpuplex.store.tables import CredentialRow

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
        self._tokens = Credentials(
            engine, "token", _token, new_prefix=new_prefix, new_secret=new_secret
        )

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
        return self._tokens.issue(
            tenant=tenant,
            name=name,
            expires_at=expires_at,
            now=now,
            actor=actor,
            made_by=made_by,
            carries={"role": role},
        )

    def list(self, tenant: str | None = None) -> builtins.list[ApiToken]:
        """Every token (of one tenant, if given), oldest first, revoked and expired ones included."""
        return self._tokens.list(tenant)

    def get(self, prefix: str) -> ApiToken | None:
        return self._tokens.get(prefix)

    def revoke(self, prefix: str, now: datetime, actor: str) -> ApiToken:
        """Revoke a token by its prefix. Revoking a revoked token changes nothing but the audit log."""
        return self._tokens.revoke(prefix, now, actor)

    def authenticate(self, token: str, now: datetime) -> TokenIdentity | None:
        """Who `token` speaks for at `now`; None when it is malformed, unknown, revoked or
        expired. The stored hash is compared in constant time. Raises CredentialSuspended for
        the token itself while it is suspended (after the hash matched: nobody learns of another
        token's state)."""
        prefix = token_prefix(token, TOKEN_SCHEME)
        if prefix is None:
            return None
        found = self._tokens.find(prefix)
        # an unknown prefix costs the same hash and comparison as a wrong secret
        stored_hash = found[1] if found is not None else _NO_SUCH_TOKEN_HASH
        if not key_matches(stored_hash, token) or found is None:
            return None
        shown, _ = found
        state = shown.state(aware_utc(now))
        if state == "suspended":
            raise CredentialSuspended(SUSPENDED)
        if state != "active":
            return None
        return TokenIdentity(shown.prefix, shown.name, shown.role, shown.tenant)


def _check_role(role: str, tenant: str | None) -> None:
    if role not in TOKEN_ROLES:
        raise ValueError(f"unknown role {role!r}: use one of {', '.join(TOKEN_ROLES)}")
    if role == "platform-admin" and tenant is not None:
        raise ValueError("a platform-admin token has no tenant: leave the tenant out")
    if role != "platform-admin" and not tenant:
        raise ValueError(f"a {role} token needs the tenant it acts for")


def _role(row: CredentialRow) -> TokenRole:
    for role in TOKEN_ROLES:
        if row.role == role:
            return role
    raise StoreError(f"token {row.prefix} has the unknown role {row.role!r}: revoke it")


def _maker(row: CredentialRow) -> str:
    """Who made the token: every token has one (the column is nullable only for keys made before
    revision 0014)."""
    if row.created_by is None:
        raise StoreError(f"token {row.prefix} has no maker: revoke it")
    return row.created_by


def _token(row: CredentialRow) -> ApiToken:
    return ApiToken(
        prefix=row.prefix,
        name=row.name,
        role=_role(row),
        tenant=row.tenant,
        created_at=row.created_at,
        created_by=_maker(row),
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        suspended_at=row.suspended_at,
        made_by=maker_of(row),
    )
