"""Issuing a secret credential (a gateway API key or a control-plane token): draw a public prefix
and a secret, store the row that carries the prefix and the hash, and draw again on the rare
prefix collision. The caller's `insert` adds the row and its audit entry in one transaction.

Also what both kinds share: their state (active, expired, revoked, suspended) and who made them
(`CredentialMaker`, kept in the columns of `tables.MadeByColumns`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuplex.core.serve.keys import PREFIX_CHARS, format_key
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.errors import StoreError
from gpuplex.ids import random_hex, random_token
from gpuplex.store.audit import append_audit
from gpuplex.store.db import safe_url, store_errors
from gpuplex.store.tables import ApiKeyRow, ApiTokenRow

SECRET_BYTES = 32
PREFIX_ATTEMPTS = 8
T = TypeVar("T")
CredentialRow = TypeVar("CredentialRow", ApiKeyRow, ApiTokenRow)
CredentialState = Literal["active", "expired", "revoked", "suspended"]
#: What an audit entry says was done to a credential (`key.create`, `token.suspend`, ...).
CredentialVerb = Literal["create", "revoke", "suspend", "resume"]


@dataclass(frozen=True, slots=True)
class CredentialMaker:
    """Who made a credential: the control-plane token that made it (its prefix), if one did, and
    the person at the root of its chain (their issuer and subject) with the grant they acted under
    (a role, on a tenant or None for the platform, and the groups that gave it). A credential made
    by a token of a person's chain has that person and grant too."""

    token_prefix: str | None = None
    issuer: str | None = None
    subject: str | None = None
    grant_role: str | None = None
    grant_tenant: str | None = None
    grant_groups: tuple[str, ...] = ()

    @property
    def person(self) -> str | None:
        """The person as the audit log names one without a name: `oidc SUBJECT at ISSUER`."""
        if self.subject is None:
            return None
        return f"oidc {self.subject} at {self.issuer}"

    def columns(self) -> dict[str, Any]:
        """Its `MadeByColumns` values."""
        return {
            "made_by_token": self.token_prefix,
            "creator_issuer": self.issuer,
            "creator_subject": self.subject,
            "grant_role": self.grant_role,
            "grant_tenant": self.grant_tenant,
            "grant_groups": list(self.grant_groups) if self.subject is not None else None,
        }

    def shown(self) -> dict[str, Any]:
        """What the audit log keeps of it."""
        return {
            "token": self.token_prefix,
            "person": self.person,
            "grant": None
            if self.subject is None
            else {
                "role": self.grant_role,
                "tenant": self.grant_tenant,
                "groups": list(self.grant_groups),
            },
        }


def maker_of(row: ApiKeyRow | ApiTokenRow) -> CredentialMaker | None:
    """Who made the credential of `row`; None when nothing was recorded (made by no person and no
    token: the CLI, `gpuplex up`, or before revision 0012)."""
    if row.made_by_token is None and row.creator_subject is None:
        return None
    return CredentialMaker(
        token_prefix=row.made_by_token,
        issuer=row.creator_issuer,
        subject=row.creator_subject,
        grant_role=row.grant_role,
        grant_tenant=row.grant_tenant,
        grant_groups=tuple(row.grant_groups or ()),
    )


def new_prefix() -> str:
    return random_hex(PREFIX_CHARS)


def new_secret() -> str:
    return random_token(SECRET_BYTES)


def issue(
    engine: Engine,
    scheme: str,
    what: str,
    insert: Callable[[Session, str, str], T],
    draw_prefix: Callable[[], str] = new_prefix,
    draw_secret: Callable[[], str] = new_secret,
) -> tuple[str, T]:
    """(the whole credential, to show once; what `insert(session, prefix, credential)` returned).
    `insert` must add the row (with a unique prefix) first, so that it takes the write lock."""
    with store_errors(engine):
        for _ in range(PREFIX_ATTEMPTS):
            prefix = draw_prefix()
            credential = format_key(prefix, draw_secret(), scheme)
            try:
                with Session(engine) as session, session.begin():
                    stored = insert(session, prefix, credential)
            except IntegrityError:
                continue  # the rare prefix collision: draw another
            return credential, stored
    raise StoreError(
        f"store {safe_url(engine.url)}: no free {what} prefix after {PREFIX_ATTEMPTS} attempts; "
        "try again"
    )


def credential_state(
    revoked_at: datetime | None,
    expires_at: datetime | None,
    now: datetime,
    suspended_at: datetime | None = None,
) -> CredentialState:
    """Revoked wins over expired, which wins over suspended (revocation is final; an expired
    credential never resumes)."""
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= now:
        return "expired"
    if suspended_at is not None:
        return "suspended"
    return "active"


def mark_revoked(
    session: Session, row_type: type[CredentialRow], prefix: str, now: datetime
) -> tuple[CredentialRow | None, bool]:
    """Revoke the credential with `prefix` in the caller's transaction, unless it already is:
    (its row, None if there is none; whether this call revoked it)."""
    result = session.execute(
        update(row_type)
        .where(row_type.prefix == prefix, row_type.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    changed = getattr(result, "rowcount", 0) == 1
    row = session.scalars(select(row_type).where(row_type.prefix == prefix)).first()
    return row, changed


def iso_or_none(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def shown_credential(row: ApiKeyRow | ApiTokenRow) -> dict[str, Any]:
    """What the audit log keeps of a credential's state, every kind alike: never its secret or
    hash. `role` is None for an API key; `models` and `limits` are None for a token."""
    shown: dict[str, Any] = {
        "name": row.name,
        "tenant": row.tenant,
        "role": None,
        "models": None,
        "limits": None,
        "expires_at": iso_or_none(row.expires_at),
        "revoked_at": iso_or_none(row.revoked_at),
        "suspended_at": iso_or_none(row.suspended_at),
    }
    if isinstance(row, ApiTokenRow):
        shown["role"] = row.role
    else:
        shown["models"] = list(row.models)
        shown["limits"] = {name: getattr(row, name) for name in RateLimits.model_fields}
    return shown


def audit_credential(
    session: Session,
    row: ApiKeyRow | ApiTokenRow,
    verb: CredentialVerb,
    *,
    now: datetime,
    actor: str,
    before: dict[str, Any] | None,
    changed: bool = True,
    why: dict[str, str] | None = None,
) -> None:
    """The one shape of every credential entry: action `KIND.VERB` (`key` or `token`), target
    `KIND:PREFIX`, the credential's tenant; `detail` its kind, name, tenant, role, who made it,
    whether this call `changed` it (revoking a revoked one does not) and, for a suspension or
    resumption, `why` (`reason` and `cause`); `before` and `after` its `shown_credential`
    (`before` None for a new one)."""
    kind = "key" if isinstance(row, ApiKeyRow) else "token"
    after = shown_credential(row)
    maker = maker_of(row)
    append_audit(
        session,
        at=now,
        actor=actor,
        action=f"{kind}.{verb}",
        target=f"{kind}:{row.prefix}",
        tenant=row.tenant,
        detail={
            "kind": kind,
            "name": row.name,
            "tenant": row.tenant,
            "role": after["role"],
            "made_by": maker.shown() if maker is not None else None,
            "changed": changed,
            **(why or {}),
        },
        before=before,
        after=after,
    )
