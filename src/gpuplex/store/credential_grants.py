"""Credentials follow the person who made them (core.access.credential_grants), in the store.

- `OidcPeople.seen`: a person's groups as the identity provider gave them now (a sign-in, a bearer
  token, a dashboard session's request). When they differ from the groups last seen, they are
  kept, with the grants they give under the rules applied now; the person's dashboard sessions
  take them too (a session never acts on groups older than the newest seen); and the person's
  credentials are judged again.
- `review_everyone`: after a spec is applied, in the same transaction as its revision: every
  person's grants again, under the new rules, and every person-made credential judged again.
- `judge_new`: a credential a person's chain makes is judged as it is stored, by the grants kept
  for the person; one made in the instant a spec took the grant away starts suspended.

Every suspension and resumption is an audit entry (`token.suspend`, `token.resume`, `key.suspend`,
`key.resume`) naming the credential, its maker, why, and what caused the change. All of this runs
under the audit log's lock (taken by the first entry, or up front by `seen`), which serialises it
with spec applies and credential creation: whichever commits second sees the first's result.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, and_, or_, select, update
from sqlalchemy.orm import Session

from gpuplex.core.access.credential_grants import (
    GrantChange,
    GrantRules,
    GrantTransition,
    MadeCredential,
    grant_changes,
    held_grants,
)
from gpuplex.core.access.oidc_groups import Grant
from gpuplex.core.access.policy import Role, oidc_actor
from gpuplex.errors import StoreError
from gpuplex.store.columns import aware_utc
from gpuplex.store.credentials import CredentialMaker, audit_credential, maker_of, shown_credential
from gpuplex.store.db import store_errors
from gpuplex.store.locks import StoreLock, write_lock
from gpuplex.store.tables import CredentialRow, OidcPersonRow, WebSessionRow

#: The applied rules, read when asked (under the lock, so a spec applied meanwhile is seen).
RulesNow = Callable[[], GrantRules | None]


@dataclass(frozen=True, slots=True)
class PersonSeen:
    issuer: str
    subject: str
    name: str
    groups: tuple[str, ...]
    grants: tuple[Grant, ...]
    seen_at: datetime


class OidcPeople:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, issuer: str, subject: str) -> PersonSeen | None:
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(OidcPersonRow, (subject, issuer))
            return _person(row) if row is not None else None

    def seen(
        self,
        *,
        issuer: str,
        subject: str,
        name: str,
        groups: Iterable[str],
        rules: RulesNow,
        now: datetime,
        cause: str,
    ) -> list[GrantChange]:
        """The person was seen now in `groups`. Writes nothing when those are the groups (and
        name) last seen, which is one read by primary key; else see the module's docstring. The
        changes it made to the person's credentials."""
        now, wanted = aware_utc(now), sorted(set(groups))
        known = self.get(issuer, subject)
        if known is not None and list(known.groups) == wanted and known.name == name:
            return []
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            write_lock(session, StoreLock.AUDIT)
            row = session.get(OidcPersonRow, (subject, issuer))
            if row is not None and row.groups == wanted and row.name == name:
                return []  # another request saw them first
            held = held_grants(issuer, wanted, rules())
            if row is None:
                row = OidcPersonRow(subject=subject, issuer=issuer)
                session.add(row)
            row.name, row.groups, row.seen_at = name, wanted, now
            row.grants = _grants_json(held)
            session.flush()
            session.execute(
                update(WebSessionRow)
                .where(WebSessionRow.subject == subject, WebSessionRow.issuer == issuer)
                .values(groups=wanted)
            )
            actor = oidc_actor(name, subject, issuer)
            return _judge_person(session, issuer, subject, held, now, actor, cause)


def review_everyone(
    session: Session, rules: GrantRules | None, now: datetime, actor: str, cause: str
) -> list[GrantChange]:
    """In the caller's transaction (a spec apply's, holding the audit lock): every person's
    grants under `rules`, and every person-made credential judged again. A credential whose
    person gpuplex never saw is judged as holding nothing."""
    write_lock(session, StoreLock.AUDIT)
    now = aware_utc(now)
    held: dict[tuple[str, str], list[Grant]] = {}
    for row in session.scalars(select(OidcPersonRow)):
        grants = held_grants(row.issuer, row.groups, rules)
        if row.grants != _grants_json(grants):
            row.grants = _grants_json(grants)
        held[(row.issuer, row.subject)] = grants
    session.flush()
    changes: list[GrantChange] = []
    for issuer, subject in sorted(_makers_of_live_credentials(session, now)):
        grants = held.get((issuer, subject), [])
        changes += _judge_person(session, issuer, subject, grants, now, actor, cause)
    return changes


def review_on_apply(
    rules: GrantRules | None, at: datetime, actor: str
) -> Callable[[Session, int], list[GrantChange]]:
    """`review_everyone` as `SpecRevisions.append` runs it (`then`), for the revision it adds."""

    def review(session: Session, revision: int) -> list[GrantChange]:
        return review_everyone(session, rules, at, actor, f"spec revision {revision} applied")

    return review


def maker_in_chain(session: Session, maker: CredentialMaker | None) -> CredentialMaker | None:
    """`maker` as a credential records it: one made by a token takes the person and grant that
    token has (its chain's root), if any."""
    if maker is None or maker.subject is not None or maker.token_prefix is None:
        return maker
    query = select(CredentialRow).where(
        CredentialRow.kind == "token", CredentialRow.prefix == maker.token_prefix
    )
    making = session.scalars(query).first()
    root = maker_of(making) if making is not None else None
    if root is None or root.subject is None:
        return maker
    return CredentialMaker(
        token_prefix=maker.token_prefix,
        issuer=root.issuer,
        subject=root.subject,
        grant_role=root.grant_role,
        grant_tenant=root.grant_tenant,
        grant_groups=root.grant_groups,
    )


def judge_new(session: Session, row: CredentialRow, now: datetime, actor: str) -> None:
    """A credential just stored (after its create entry, so under the audit lock): suspended at
    once when its person does not hold, as kept now, a grant that could make it."""
    if row.creator_subject is None or row.creator_issuer is None:
        return
    person = session.get(OidcPersonRow, (row.creator_subject, row.creator_issuer))
    held = [_grant(g) for g in person.grants] if person is not None else []
    for change in grant_changes([_made(row)], held):
        _record(session, row, change, now, actor, "made while its maker's grant was gone")


def _makers_of_live_credentials(session: Session, now: datetime) -> set[tuple[str, str]]:
    query = (
        select(CredentialRow.creator_issuer, CredentialRow.creator_subject)
        .where(_live(now), CredentialRow.creator_subject.is_not(None))
        .distinct()
    )
    return {(i, s) for i, s in session.execute(query) if i is not None and s is not None}


def _judge_person(
    session: Session,
    issuer: str,
    subject: str,
    held: builtins.list[Grant],
    now: datetime,
    actor: str,
    cause: str,
) -> list[GrantChange]:
    query = (
        select(CredentialRow)
        .where(
            _live(now),
            CredentialRow.creator_subject == subject,
            CredentialRow.creator_issuer == issuer,
        )
        # tokens before keys ("token" > "key"), each kind oldest first
        .order_by(CredentialRow.kind.desc(), CredentialRow.id)
    )
    rows = list(session.scalars(query))
    by_prefix = {(row.kind, row.prefix): row for row in rows}
    changes = grant_changes([_made(row) for row in rows], held)
    for change in changes:
        row = by_prefix[(change.credential.kind, change.credential.prefix)]
        _record(session, row, change, now, actor, cause)
    return changes


def _record(
    session: Session,
    row: CredentialRow,
    change: GrantChange,
    now: datetime,
    actor: str,
    cause: str,
) -> None:
    """Suspend or resume the credential of `row`, with its audit entry."""
    before = shown_credential(row)
    suspend = change.transition is GrantTransition.SUSPEND
    row.suspended_at = now if suspend else None
    row.suspension_changes = (row.suspension_changes or 0) + 1
    session.flush()
    audit_credential(
        session,
        row,
        "suspend" if suspend else "resume",
        now=now,
        actor=actor,
        before=before,
        why={"reason": change.reason, "cause": cause},
    )


def _live(now: datetime) -> Any:
    return and_(
        CredentialRow.revoked_at.is_(None),
        or_(CredentialRow.expires_at.is_(None), CredentialRow.expires_at > now),
    )


def _made(row: CredentialRow) -> MadeCredential:
    if row.kind == "token":
        if row.role is None:
            raise StoreError(f"token {row.prefix} has no role: revoke it")
        return MadeCredential(
            "token", row.prefix, row.tenant, row.suspended_at is not None, Role(row.role)
        )
    return MadeCredential("key", row.prefix, row.tenant, row.suspended_at is not None)


def _grants_json(grants: Iterable[Grant]) -> list[dict[str, Any]]:
    return [{"role": g.role.value, "tenant": g.tenant} for g in grants]


def _grant(stored: dict[str, Any]) -> Grant:
    return Grant(Role(stored["role"]), stored.get("tenant"))


def _person(row: OidcPersonRow) -> PersonSeen:
    return PersonSeen(
        issuer=row.issuer,
        subject=row.subject,
        name=row.name,
        groups=tuple(row.groups),
        grants=tuple(_grant(g) for g in row.grants),
        seen_at=aware_utc(row.seen_at),
    )
