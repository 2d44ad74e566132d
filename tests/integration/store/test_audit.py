"""The hash-chained audit log on SQLite and PostgreSQL: a scripted sequence of changes verifies;
an edited, deleted or swapped entry is found and named; concurrent writers keep one chain; the
log's filters and paging; no secret is ever in it."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine, text

from gpuplex.core.spec import RateLimits
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.audit_chain import GENESIS_HASH
from gpuplex.store.budgets import BudgetRepository
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.spec_revisions import SpecRevisions
from gpuplex.store.tokens import TokenRepository

T0 = datetime(2025, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)
SHA_A, SHA_B = "a" * 64, "b" * 64


def scripted_changes(engine: Engine) -> list[str]:
    """Keys, tokens, spec revisions and budgets, as an operator would change them; the secrets."""
    keys, tokens = KeyRepository(engine), TokenRepository(engine)
    specs, budgets = SpecRevisions(engine), BudgetRepository(engine)
    at = iter(T0 + timedelta(seconds=n) for n in range(100))
    key, api_key = keys.create(
        "acme", "ci", ["chat"], None, RateLimits(requests_per_min=60), next(at), "alice"
    )
    keys.revoke(api_key.prefix, next(at), "alice")
    token, admin = tokens.create("ops", "platform-admin", None, None, next(at), "root")
    viewer_token, viewer = tokens.create("acme-ro", "tenant-viewer", "acme", None, next(at), "ops")
    tokens.revoke(viewer.prefix, next(at), "ops")
    first = specs.append("tenants: []\n", SHA_A, {"placements": []}, "ops", next(at), None)
    specs.append("tenants: [x]\n", SHA_B, {"placements": [1]}, "ops", next(at), first.revision)
    budgets.set("acme", Decimal("1000.00"), "USD", now=next(at), actor="ops")
    budgets.set(
        "acme",
        Decimal("1500.50"),
        "USD",
        now=next(at),
        actor="ops",
        webhook_url="https://hooks.example.com/services/T000/SECRETPATH?token=s3cr3t",
    )
    budgets.delete("acme", next(at), "ops")
    assert admin.role == "platform-admin"
    return [key, token, viewer_token, "SECRETPATH", "s3cr3t"]


def test_a_scripted_sequence_of_changes_verifies(engine: Engine) -> None:
    secrets = scripted_changes(engine)
    verdict = verify_audit(engine)
    assert verdict.ok, verdict
    assert verdict.entries_checked == 10
    assert verdict.first_bad_id is None
    entries = AuditLog(engine).entries()
    assert [e.action for e in entries] == [
        "key.create",
        "key.revoke",
        "token.create",
        "token.create",
        "token.revoke",
        "spec.apply",
        "spec.apply",
        "budget.set",
        "budget.set",
        "budget.delete",
    ]
    assert [e.tenant for e in entries] == ["acme", "acme", None, "acme", "acme"] + [None] * 2 + [
        "acme"
    ] * 3
    assert entries[0].prev_hash == GENESIS_HASH
    for previous, entry in itertools.pairwise(entries):
        assert entry.prev_hash == previous.entry_hash
    spec2 = entries[6]
    assert spec2.before == {"revision": entries[5].after["revision"], "spec_sha256": SHA_A}
    assert spec2.after["spec_sha256"] == SHA_B
    assert entries[8].before["amount"] == "1000.00"
    assert entries[8].after["amount"] == "1500.50"
    assert entries[8].after["webhook_url"] == "https://hooks.example.com/..."
    assert entries[9].after is None
    with engine.connect() as connection:
        stored = " ".join(
            str(value)
            for row in connection.execute(text("SELECT * FROM audit_log"))
            for value in row
        )
    for secret in secrets:
        assert secret not in stored


def test_an_edited_entry_is_named(engine: Engine) -> None:
    scripted_changes(engine)
    victim = AuditLog(engine).entries()[3]
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_log SET detail = :detail WHERE id = :id"),
            {"detail": '{"name": "innocent", "role": "tenant-viewer"}', "id": victim.id},
        )
    verdict = verify_audit(engine)
    assert not verdict.ok
    assert verdict.first_bad_id == victim.id
    assert verdict.entries_checked == 4
    assert f"entry {victim.id} was changed" in verdict.reason


def test_an_edited_entry_with_its_hash_recomputed_breaks_the_next_link(engine: Engine) -> None:
    scripted_changes(engine)
    entries = AuditLog(engine).entries()
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE audit_log SET entry_hash = :forged WHERE id = :id"),
            {"forged": "f" * 64, "id": entries[2].id},
        )
    verdict = verify_audit(engine)
    assert verdict.first_bad_id == entries[2].id  # its own hash no longer matches its content


def test_a_deleted_entry_is_found_at_the_entry_after_the_gap(engine: Engine) -> None:
    scripted_changes(engine)
    entries = AuditLog(engine).entries()
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM audit_log WHERE id = :id"), {"id": entries[4].id})
    verdict = verify_audit(engine)
    assert not verdict.ok
    assert verdict.first_bad_id == entries[5].id
    assert f"entry {entries[5].id} does not link to entry {entries[3].id}" in verdict.reason
    assert "deleted" in verdict.reason


def test_deleting_the_first_entry_is_found(engine: Engine) -> None:
    scripted_changes(engine)
    entries = AuditLog(engine).entries()
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM audit_log WHERE id = :id"), {"id": entries[0].id})
    verdict = verify_audit(engine)
    assert verdict.first_bad_id == entries[1].id
    assert "the start of the log" in verdict.reason


def test_swapped_entries_are_found(engine: Engine) -> None:
    scripted_changes(engine)
    first, second = AuditLog(engine).entries()[1:3]
    with engine.begin() as connection:
        for entry, other in ((first, second), (second, first)):
            connection.execute(
                text("UPDATE audit_log SET actor = :actor, action = :action WHERE id = :id"),
                {"actor": other.actor, "action": other.action, "id": entry.id},
            )
    assert verify_audit(engine).first_bad_id == first.id


def test_an_empty_log_verifies(engine: Engine) -> None:
    verdict = verify_audit(engine)
    assert (verdict.ok, verdict.entries_checked, verdict.first_bad_id) == (True, 0, None)


def test_a_rolled_back_append_leaves_the_chain_intact(engine: Engine) -> None:
    keys = KeyRepository(engine)
    _, key = keys.create("acme", "", [], None, RateLimits(), T0, "tester")
    with pytest.raises(ValueError, match="naive"):
        keys.revoke(key.prefix, T0.replace(tzinfo=None), "tester")
    keys.revoke(key.prefix, T0, "tester")
    assert verify_audit(engine).ok


def test_concurrent_writers_on_separate_engines_keep_one_chain(store_url: str) -> None:
    engines = [open_store(store_url) for _ in range(4)]
    errors: list[BaseException] = []

    def work(index: int, engine: Engine) -> None:
        try:
            keys, tokens = KeyRepository(engine), TokenRepository(engine)
            for n in range(8):
                _, key = keys.create(f"t{index}", "", [], None, RateLimits(), T0, "w")
                tokens.create(f"tok{n}", "tenant-admin", f"t{index}", None, T0, "w")
                keys.revoke(key.prefix, T0, "w")
        except BaseException as error:  # re-raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i, e)) for i, e in enumerate(engines)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert errors == []
        verdict = verify_audit(engines[0])
        assert (verdict.ok, verdict.entries_checked) == (True, 4 * 8 * 3), verdict
    finally:
        for engine in engines:
            engine.dispose()


def test_entries_filter_by_tenant_and_action_and_page_back(engine: Engine) -> None:
    scripted_changes(engine)
    log = AuditLog(engine)
    everything = log.entries()
    assert [e.action for e in log.entries(tenant="acme", action="budget.set")] == ["budget.set"] * 2
    assert all(e.tenant == "acme" for e in log.entries(tenant="acme"))
    assert log.entries(tenant="nobody") == []
    newest = log.entries(limit=4)
    assert newest == everything[-4:]
    older = log.entries(limit=4, before_id=newest[0].id)
    assert older == everything[-8:-4]
    assert log.entries(limit=4, before_id=everything[0].id) == []
