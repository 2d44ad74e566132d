"""The one repository of secret credentials: gateway API keys and control-plane tokens, one table
(`credentials`), one code path for each thing done to them.

`Credentials(engine, kind, shape)` works on the credentials of one kind and hands out what `shape`
makes of a row (keys.ApiKey, tokens.ApiToken: never the hash):

- `issue`: draw a public prefix and a secret, store the prefix and the SHA-256 of the whole
  credential (never the credential), append its `create` entry and judge it against its maker's
  grant (store/credential_grants.py), all in one transaction; draw again on the rare prefix
  collision. The credential is returned once.
- `get`, `list`, `find` (with the stored hash, for a constant-time check), `active` (those that
  work now, with their hashes), `revoke` (one-way, audited; revoking a revoked one changes
  nothing but the audit log) and `version` (a cheap figure that changes whenever one is created,
  revoked, suspended or resumed, for the gateway to poll).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine, func, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuplex.core.serve.keys import KEY_SCHEME, TOKEN_SCHEME, format_key, key_hash
from gpuplex.errors import NotFoundError, StoreError
from gpuplex.store import credentials
from gpuplex.store.columns import aware_utc
from gpuplex.store.credential_grants import judge_new, maker_in_chain
from gpuplex.store.credentials import (
    CredentialKind,
    CredentialMaker,
    audit_credential,
    shown_credential,
)
from gpuplex.store.db import safe_url, store_errors
from gpuplex.store.tables import CredentialRow

PREFIX_ATTEMPTS = 8
SCHEMES: dict[CredentialKind, str] = {"key": KEY_SCHEME, "token": TOKEN_SCHEME}
NOT_FOUND: dict[CredentialKind, str] = {
    "key": "no API key with prefix {prefix!r}; `gpuplex keys list` shows the prefixes",
    "token": "no control-plane token with prefix {prefix!r}; list the tokens to see their prefixes",
}
Shown = TypeVar("Shown")


class Credentials(Generic[Shown]):
    def __init__(
        self,
        engine: Engine,
        kind: CredentialKind,
        shape: Callable[[CredentialRow], Shown],
        *,
        new_prefix: Callable[[], str] = credentials.new_prefix,
        new_secret: Callable[[], str] = credentials.new_secret,
    ) -> None:
        self._engine = engine
        self._kind: CredentialKind = kind
        self._shape = shape
        self._new_prefix = new_prefix
        self._new_secret = new_secret

    def issue(
        self,
        *,
        tenant: str | None,
        name: str,
        expires_at: datetime | None,
        now: datetime,
        actor: str,
        made_by: CredentialMaker | None,
        carries: dict[str, Any],
    ) -> tuple[str, Shown]:
        """A new credential: (the whole credential, to show once; its shape). `carries`: the
        columns only its kind has (a key's models and limits, a token's role). `made_by`: the
        person or token that makes it (a token of a person's chain passes its person on)."""
        now = aware_utc(now)
        expires_at = aware_utc(expires_at) if expires_at is not None else None

        def insert(session: Session, prefix: str, credential: str) -> Shown:
            maker = maker_in_chain(session, made_by)
            row = CredentialRow(
                kind=self._kind,
                prefix=prefix,
                secret_hash=key_hash(credential),
                tenant=tenant,
                name=name,
                created_at=now,
                created_by=actor,
                expires_at=expires_at,
                revoked_at=None,
                **carries,
                **(maker.columns() if maker is not None else {}),
            )
            session.add(row)
            session.flush()  # the insert first: it takes the write lock
            audit_credential(session, row, "create", now=now, actor=actor, before=None)
            judge_new(session, row, now, actor)
            return self._shape(row)

        with store_errors(self._engine):
            for _ in range(PREFIX_ATTEMPTS):
                prefix = self._new_prefix()
                credential = format_key(prefix, self._new_secret(), SCHEMES[self._kind])
                try:
                    with Session(self._engine) as session, session.begin():
                        shown = insert(session, prefix, credential)
                except IntegrityError:
                    continue  # the rare prefix collision: draw another
                return credential, shown
        raise StoreError(
            f"store {safe_url(self._engine.url)}: no free {self._kind} prefix after "
            f"{PREFIX_ATTEMPTS} attempts; try again"
        )

    def get(self, prefix: str) -> Shown | None:
        found = self.find(prefix)
        return found[0] if found is not None else None

    def find(self, prefix: str) -> tuple[Shown, str] | None:
        """The credential with `prefix` and its stored hash; None when there is none."""
        query = select(CredentialRow).where(self._of_kind, CredentialRow.prefix == prefix)
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.scalars(query).first()
            return (self._shape(row), row.secret_hash) if row is not None else None

    def list(self, tenant: str | None = None) -> builtins.list[Shown]:
        """Every credential (of one tenant, if given), oldest first, revoked and expired ones
        included."""
        query = select(CredentialRow).where(self._of_kind).order_by(CredentialRow.id)
        if tenant is not None:
            query = query.where(CredentialRow.tenant == tenant)
        with store_errors(self._engine), Session(self._engine) as session:
            return [self._shape(row) for row in session.scalars(query)]

    def active(self, now: datetime) -> builtins.list[tuple[Shown, str]]:
        """The credentials that work at `now` (not revoked, suspended or expired), with their
        stored hashes, oldest first."""
        query = (
            select(CredentialRow)
            .where(
                self._of_kind,
                CredentialRow.revoked_at.is_(None),
                CredentialRow.suspended_at.is_(None),
                or_(CredentialRow.expires_at.is_(None), CredentialRow.expires_at > aware_utc(now)),
            )
            .order_by(CredentialRow.id)
        )
        with store_errors(self._engine), Session(self._engine) as session:
            return [(self._shape(row), row.secret_hash) for row in session.scalars(query)]

    def revoke(self, prefix: str, now: datetime, actor: str) -> Shown:
        """Revoke the credential with `prefix`. Revoking a revoked one changes nothing but the
        audit log."""
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            result = session.execute(
                update(CredentialRow)
                .where(
                    self._of_kind,
                    CredentialRow.prefix == prefix,
                    CredentialRow.revoked_at.is_(None),
                )
                .values(revoked_at=now)
            )
            changed = getattr(result, "rowcount", 0) == 1
            query = select(CredentialRow).where(self._of_kind, CredentialRow.prefix == prefix)
            row = session.scalars(query).first()
            if row is None:
                raise NotFoundError(NOT_FOUND[self._kind].format(prefix=prefix))
            after = shown_credential(row)
            before = after | {"revoked_at": None} if changed else after
            audit_credential(
                session, row, "revoke", now=now, actor=actor, before=before, changed=changed
            )
            return self._shape(row)

    def version(self) -> str:
        """Changes whenever a credential of this kind is created, revoked, suspended or resumed:
        one small aggregate query, cheap enough to poll twice a second from every gateway
        worker. (Credentials are never deleted, revocation is one-way, and each suspension or
        resumption adds one to its credential's `suspension_changes`, so all four figures only
        grow.)"""
        query = select(
            func.count(CredentialRow.id),
            func.max(CredentialRow.id),
            func.count(CredentialRow.revoked_at),
            func.coalesce(func.sum(CredentialRow.suspension_changes), 0),
        ).where(self._of_kind)
        with store_errors(self._engine), self._engine.connect() as connection:
            count, max_id, revoked, suspensions = connection.execute(query).one()
        return f"{count}.{max_id or 0}.{revoked}.{suspensions}"

    @property
    def _of_kind(self) -> Any:
        return CredentialRow.kind == self._kind
