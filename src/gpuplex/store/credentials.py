"""Issuing a secret credential (a gateway API key or a control-plane token): draw a public prefix
and a secret, store the row that carries the prefix and the hash, and draw again on the rare
prefix collision. The caller's `insert` adds the row and its audit entry in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, TypeVar

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpuplex.core.serve.keys import PREFIX_CHARS, format_key
from gpuplex.errors import StoreError
from gpuplex.ids import random_hex, random_token
from gpuplex.store.db import safe_url, store_errors
from gpuplex.store.tables import ApiKeyRow, ApiTokenRow

SECRET_BYTES = 32
PREFIX_ATTEMPTS = 8
T = TypeVar("T")
CredentialRow = TypeVar("CredentialRow", ApiKeyRow, ApiTokenRow)
CredentialState = Literal["active", "expired", "revoked"]


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
    revoked_at: datetime | None, expires_at: datetime | None, now: datetime
) -> CredentialState:
    if revoked_at is not None:
        return "revoked"
    if expires_at is not None and expires_at <= now:
        return "expired"
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
