"""The audit log's hash chain, as pure functions over the stored values.

Each entry's `entry_hash` is the SHA-256 of the canonical JSON (sorted keys, no spaces) of
{id, at (ISO 8601, UTC), actor, action, target, tenant, detail, before, after, prev_hash}, and its
`prev_hash` is the previous entry's `entry_hash` (64 zeros for the first). Editing an entry changes
its hash; deleting one breaks the next entry's link; moving one changes its id and so its hash.
Gaps in ids alone are not damage: a rolled-back append leaves one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuplex.core.plural import counted

GENESIS_HASH = "0" * 64


@dataclass(frozen=True, slots=True)
class ChainedFields:
    """What an entry's hash covers, as stored."""

    id: int
    at: datetime
    actor: str
    action: str
    target: str
    tenant: str | None
    detail: Any
    before: Any
    after: Any
    prev_hash: str


@dataclass(frozen=True, slots=True)
class AuditVerdict:
    """The result of checking the chain: `first_bad_id` names the first entry that is not intact."""

    ok: bool
    entries_checked: int
    first_bad_id: int | None
    reason: str


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def as_stored(value: Any) -> Any:
    """The value as a JSON column gives it back (tuples become lists, and so on)."""
    return None if value is None else json.loads(canonical_json(value))


def entry_hash(fields: ChainedFields) -> str:
    document = {
        "id": fields.id,
        "at": fields.at.astimezone(UTC).isoformat(),
        "actor": fields.actor,
        "action": fields.action,
        "target": fields.target,
        "tenant": fields.tenant,
        "detail": fields.detail,
        "before": fields.before,
        "after": fields.after,
        "prev_hash": fields.prev_hash,
    }
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def check_chain(entries: Iterable[tuple[ChainedFields, str]]) -> AuditVerdict:
    """Check (fields, stored entry_hash) pairs in id order; stops at the first broken entry."""
    checked = 0
    previous_id: int | None = None
    expected_prev = GENESIS_HASH
    for fields, stored_hash in entries:
        checked += 1
        if fields.prev_hash != expected_prev:
            after = f"entry {previous_id}" if previous_id is not None else "the start of the log"
            return AuditVerdict(
                ok=False,
                entries_checked=checked,
                first_bad_id=fields.id,
                reason=(
                    f"entry {fields.id} does not link to {after}: an entry between them was "
                    "deleted, or one was inserted or reordered"
                ),
            )
        if entry_hash(fields) != stored_hash:
            return AuditVerdict(
                ok=False,
                entries_checked=checked,
                first_bad_id=fields.id,
                reason=f"entry {fields.id} was changed after it was written (its hash differs)",
            )
        previous_id = fields.id
        expected_prev = stored_hash
    return AuditVerdict(
        ok=True,
        entries_checked=checked,
        first_bad_id=None,
        reason=f"{counted(checked, 'entry', 'entries')}, hash chain intact",
    )
