"""UsageRepository on SQLite and PostgreSQL: inserts are idempotent by request_id, and what comes
back equals what went in, with aware UTC times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from sqlalchemy import Engine

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.store.usage import UsageRepository

T0 = datetime(2025, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)


def record(n: int, tenant: str = "acme", *, at: datetime = T0, tokens: int = 10) -> UsageRecord:
    return UsageRecord(
        request_id=f"req-{tenant}-{n:06d}",
        tenant=tenant,
        key_prefix="1a2b3c4d",
        model="chat",
        endpoint="chat.completions",
        status=200 if n % 7 else 429,
        prompt_tokens=tokens,
        completion_tokens=2 * tokens,
        latency_s=0.125 * (n % 5),
        started_at=at + timedelta(seconds=n),
        stream=n % 2 == 0,
    )


def test_the_same_batch_twice_is_counted_once(engine: Engine) -> None:
    usage = UsageRepository(engine)
    batch = [record(n) for n in range(50)]
    assert usage.insert_many(batch) == 50
    assert usage.insert_many(batch) == 0
    assert usage.count() == 50
    assert usage.request_ids() == {r.request_id for r in batch}


def test_an_overlapping_batch_stores_only_the_new_records(engine: Engine) -> None:
    usage = UsageRepository(engine)
    assert usage.insert_many([record(n) for n in range(10)]) == 10
    assert usage.insert_many([record(n) for n in range(5, 15)]) == 5
    assert usage.insert_many([record(20), record(20)]) == 1  # a duplicate inside one batch
    assert usage.insert_many([]) == 0
    assert usage.count() == 16


def test_a_large_batch_goes_in_whole(engine: Engine) -> None:
    usage = UsageRepository(engine)
    batch = [record(n) for n in range(3000)]
    assert usage.insert_many(batch) == 3000
    assert usage.insert_many([*batch[1000:2000], record(5000)]) == 1
    assert usage.count() == 3001


def test_records_come_back_as_they_went_in_with_aware_utc_times(engine: Engine) -> None:
    usage = UsageRepository(engine)
    minus_seven = timezone(timedelta(hours=-7))
    batch = [record(n, at=T0.astimezone(minus_seven)) for n in range(4)]
    usage.insert_many(batch)
    back = usage.records()
    assert back == batch  # equal instants; dataclass equality compares the datetimes as instants
    for item in back:
        assert item.started_at.tzinfo is UTC
        assert item.started_at.microsecond == 250000
    assert [r.stream for r in back] == [True, False, True, False]


def test_records_by_tenant_and_time_range(engine: Engine) -> None:
    usage = UsageRepository(engine)
    usage.insert_many(
        [record(n, "acme") for n in range(10)] + [record(n, "globex") for n in range(3)]
    )
    since, until = T0 + timedelta(seconds=2), T0 + timedelta(seconds=5)
    in_range = usage.records("acme", since, until)
    assert [r.request_id for r in in_range] == [f"req-acme-{n:06d}" for n in (2, 3, 4)]
    assert len(usage.records("globex")) == 3
    assert len(usage.records(since=T0 + timedelta(seconds=9))) == 1
    assert usage.records("nobody") == []


def test_count_and_totals_by_tenant(engine: Engine) -> None:
    usage = UsageRepository(engine)
    assert usage.totals_by_tenant() == {}
    usage.insert_many([record(n, "acme", tokens=10) for n in range(4)])
    usage.insert_many([record(n, "globex", tokens=100) for n in range(2)])
    assert usage.count() == 6
    assert usage.count("acme") == 4
    assert usage.count("nobody") == 0
    assert usage.totals_by_tenant() == {"acme": (4, 4 * 30), "globex": (2, 2 * 300)}
