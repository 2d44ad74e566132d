"""Spec revisions on SQLite and PostgreSQL: numbering, current, get, paging, the stale-revision
check (also when two appends race on one base) and the audit entry each append writes."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Engine

from gpuplex.errors import ErrorCode, StaleRevisionError
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.db import open_store
from gpuplex.store.spec_revisions import SpecRevision, SpecRevisions

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PLAN = {"placements": [{"tenant": "acme", "gpu_indices": [0]}], "summary": {"placed": 1}}


def apply(specs: SpecRevisions, n: int, base: int | None) -> SpecRevision:
    return specs.append(f"# spec {n}\n", f"{n:064x}", PLAN, "ops", T0 + timedelta(minutes=n), base)


def test_revisions_are_numbered_from_one_and_the_newest_is_current(engine: Engine) -> None:
    specs = SpecRevisions(engine)
    assert specs.current() is None
    assert specs.list() == []
    first = apply(specs, 1, None)
    second = apply(specs, 2, first.revision)
    third = apply(specs, 3, second.revision)
    assert [r.revision for r in (first, second, third)] == [1, 2, 3]
    assert specs.current() == third
    assert specs.get(2) == second
    assert specs.get(99) is None
    assert second.plan == PLAN
    assert second.spec_yaml == "# spec 2\n"
    assert second.created_at == T0 + timedelta(minutes=2)
    assert second.created_at.tzinfo is UTC
    assert specs.list() == [third, second, first]
    assert specs.list(limit=2) == [third, second]
    assert specs.list(limit=2, before=2) == [first]


def test_zero_is_the_base_of_an_empty_history(engine: Engine) -> None:
    assert apply(SpecRevisions(engine), 1, 0).revision == 1


@pytest.mark.parametrize("base", [None, 0, 1, 3])
def test_a_stale_base_is_refused_and_writes_nothing(engine: Engine, base: int | None) -> None:
    specs = SpecRevisions(engine)
    apply(specs, 1, None)
    apply(specs, 2, 1)
    with pytest.raises(StaleRevisionError) as raised:
        apply(specs, 3, base)
    assert raised.value.code is ErrorCode.SPEC_STALE
    assert raised.value.code.value == "spec_stale"  # the stable code the API sends
    assert raised.value.current_revision == 2
    assert raised.value.base_revision == base
    assert "the current revision is 2" in raised.value.message
    assert [r.revision for r in specs.list()] == [2, 1]
    assert len(AuditLog(engine).entries()) == 2


def test_a_base_on_an_empty_history_is_stale(engine: Engine) -> None:
    with pytest.raises(
        StaleRevisionError, match="there is no revision 5: the current revision is 0"
    ):
        apply(SpecRevisions(engine), 1, 5)


def test_each_append_is_audited_with_the_revision_before_and_after(engine: Engine) -> None:
    specs = SpecRevisions(engine)
    plus_two = timezone(timedelta(hours=2))
    specs.append("a: 1\n", "a" * 64, PLAN, "alice", T0.astimezone(plus_two), None)
    apply(specs, 2, 1)
    first, second = AuditLog(engine).entries("spec.apply")
    assert (first.actor, first.target, first.tenant, first.at) == ("alice", "spec:1", None, T0)
    assert first.before is None
    assert first.after == {"revision": 1, "spec_sha256": "a" * 64}
    assert second.before == {"revision": 1, "spec_sha256": "a" * 64}
    assert second.after == {"revision": 2, "spec_sha256": f"{2:064x}"}
    assert verify_audit(engine).ok


def test_appends_racing_on_one_base_let_exactly_one_win(store_url: str) -> None:
    engines = [open_store(store_url) for _ in range(6)]
    try:
        apply(SpecRevisions(engines[0]), 1, None)
        barrier = threading.Barrier(len(engines))
        outcomes: list[str] = []

        def race(index: int, engine: Engine) -> None:
            barrier.wait()
            try:
                apply(SpecRevisions(engine), 10 + index, 1)
                outcomes.append("applied")
            except StaleRevisionError:
                outcomes.append("stale")
            except BaseException as error:  # shown by the assertion below
                outcomes.append(repr(error))

        threads = [threading.Thread(target=race, args=(i, e)) for i, e in enumerate(engines)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(outcomes) == ["applied"] + ["stale"] * (len(engines) - 1)
        current = SpecRevisions(engines[0]).current()
        assert current is not None
        assert current.revision == 2
        assert verify_audit(engines[0]).entries_checked == 2
    finally:
        for engine in engines:
            engine.dispose()


def test_in_force_gives_the_revision_before_a_range_and_those_inside_it(engine: Engine) -> None:
    specs = SpecRevisions(engine)
    assert specs.first_applied_at() is None
    assert specs.in_force(T0, T0 + timedelta(hours=1)) == []
    base = None
    for n in (1, 2, 3, 4):  # applied at minutes 1, 2, 3 and 4
        base = apply(specs, n, base).revision

    def numbers(start_min: int, end_min: int) -> list[int]:
        start, end = T0 + timedelta(minutes=start_min), T0 + timedelta(minutes=end_min)
        return [r.revision for r in specs.in_force(start, end)]

    assert numbers(0, 1) == []  # nothing was applied yet
    assert numbers(2, 4) == [1, 2, 3]  # the one applied before the range, then those inside
    assert numbers(5, 9) == [4]  # only the newest, applied before the range
    assert numbers(3, 3) == [2]
    assert specs.first_applied_at() == T0 + timedelta(minutes=1)
