"""The store's pure parts: UTC datetimes in and out, key states, URLs as shown, bad URLs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Dialect
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg

from gpuplex.core.spec import RateLimits
from gpuplex.errors import StoreError
from gpuplex.store.db import open_store, safe_url
from gpuplex.store.keys import ApiKey
from gpuplex.store.tables import UtcDateTime

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
PLUS_TWO = timezone(timedelta(hours=2))
SQLITE: Dialect = sqlite.dialect()
POSTGRES: Dialect = psycopg.dialect()  # type: ignore[no-untyped-call]


def test_utc_datetime_stores_naive_utc_on_sqlite_and_aware_utc_on_postgresql() -> None:
    column = UtcDateTime()
    local = T0.astimezone(PLUS_TWO)
    assert column.process_bind_param(local, SQLITE) == T0.replace(tzinfo=None)
    on_postgres = column.process_bind_param(local, POSTGRES)
    assert on_postgres == T0
    assert on_postgres is not None
    assert on_postgres.tzinfo is UTC
    assert column.process_bind_param(None, SQLITE) is None


def test_utc_datetime_refuses_naive_times() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        UtcDateTime().process_bind_param(datetime(2025, 1, 1), SQLITE)  # noqa: DTZ001


@pytest.mark.parametrize(
    "stored",
    [datetime(2025, 3, 1, 12, 0), datetime(2025, 3, 1, 14, 0, tzinfo=PLUS_TWO)],  # noqa: DTZ001
    ids=["naive-from-sqlite", "aware-from-postgresql"],
)
def test_utc_datetime_comes_back_aware_utc(stored: datetime) -> None:
    back = UtcDateTime().process_result_value(stored, SQLITE)
    assert back == T0
    assert back is not None
    assert back.tzinfo is UTC


def _key(expires_at: datetime | None = None, revoked_at: datetime | None = None) -> ApiKey:
    return ApiKey(
        "1a2b3c4d",
        "acme",
        "",
        (),
        T0,
        expires_at,
        revoked_at,
        RateLimits(requests_per_min=60, concurrent_requests=2),
    )


def test_key_state() -> None:
    assert _key().state(T0 + timedelta(days=999)) == "active"
    expiring = _key(expires_at=T0 + timedelta(hours=1))
    assert expiring.state(T0 + timedelta(minutes=59)) == "active"
    assert expiring.state(T0 + timedelta(hours=1)) == "expired"
    assert _key(expires_at=T0 + timedelta(hours=1), revoked_at=T0).state(T0) == "revoked"
    assert _key().limits == RateLimits(requests_per_min=60, concurrent_requests=2)


def test_safe_url_hides_the_password() -> None:
    shown = safe_url("postgresql+psycopg://app:s3cret@db.example:5432/gpuplex")
    assert shown == "postgresql+psycopg://app:***@db.example:5432/gpuplex"
    assert (
        safe_url("sqlite:////var/lib/gpuplex/gpuplex.db") == "sqlite:////var/lib/gpuplex/gpuplex.db"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("not a url", "is not a URL"),
        ("", "is not a URL"),
        ("mysql://app:s3cret@db/gpuplex", "'mysql' is not supported"),
        ("nosuchdb://app:s3cret@host/x", "'nosuchdb' is not supported"),
        ("postgresql+nosuchdriver://app:s3cret@host/x", "cannot load its driver"),
        ("sqlite+nosuchdriver:///x.db", "cannot load its driver"),
    ],
)
def test_a_bad_url_is_a_store_error_that_says_what_to_write(url: str, says: str) -> None:
    with pytest.raises(StoreError) as raised:
        open_store(url)
    assert says in raised.value.message
    assert "s3cret" not in raised.value.message
    assert "--store or GPUPLEX_STORE_URL" in raised.value.message
