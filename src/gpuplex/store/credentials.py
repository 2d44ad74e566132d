"""What every kind of secret credential shares (a gateway API key, kind "key", or a
control-plane token, kind "token"; one table, `credentials`, tables.CredentialRow): its state
(active, expired, revoked, suspended), who made it (`CredentialMaker`), what the audit log shows
of it (`shown_credential`) and the one shape of its audit entries (`audit_credential`).

The repository that stores them is credential_repository.py; keys.py and tokens.py are its two
typed faces."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy.orm import Session

from gpuplex.core.access.credential_grants import CredentialKind as CredentialKind
from gpuplex.core.serve.keys import PREFIX_CHARS
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.ids import random_hex, random_token
from gpuplex.store.audit import append_audit
from gpuplex.store.tables import CredentialRow

SECRET_BYTES = 32
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


def maker_of(row: CredentialRow) -> CredentialMaker | None:
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


def iso_or_none(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def shown_credential(row: CredentialRow) -> dict[str, Any]:
    """What the audit log keeps of a credential's state, every kind alike: never its secret or
    its hash. `role` is None for an API key; `models` and `limits` are None for a token."""
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
    if row.kind == "token":
        shown["role"] = row.role
    else:
        shown["models"] = list(row.models or ())
        shown["limits"] = {name: getattr(row, name) for name in RateLimits.model_fields}
    return shown


def audit_credential(
    session: Session,
    row: CredentialRow,
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
    kind = row.kind
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
