"""Column types the tables share: 64-bit ids, timezone-aware UTC datetimes, and money.

Datetimes are stored as UTC and always come back timezone-aware UTC, on SQLite too (which has no
timezone type: it keeps naive UTC text there). Money is a Decimal stored as its text, exactly: a
NUMERIC column would round-trip through float on SQLite (and SQLAlchemy warns about it).
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import BigInteger, DateTime, Dialect, Integer, String
from sqlalchemy.types import TypeDecorator

#: Autoincrementing 64-bit ids; SQLite only autoincrements an INTEGER PRIMARY KEY (64-bit anyway).
BigId = BigInteger().with_variant(Integer(), "sqlite")

#: Characters a Money column holds: more digits than any bill needs, and the sign and point.
MONEY_CHARS = 40


def aware_utc(at: datetime) -> datetime:
    """`at` in UTC; a naive time is refused (it could mean any zone)."""
    if at.tzinfo is None:
        raise ValueError(f"naive datetime {at.isoformat()}: pass a timezone-aware UTC time")
    return at.astimezone(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A timestamp that must be timezone-aware going in and is aware UTC coming out."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value.isoformat()}: pass a timezone-aware UTC time")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Money(TypeDecorator[Decimal]):
    """A Decimal amount stored as text (`12.50` stays `12.50`); floats and NaN are refused."""

    impl = String(MONEY_CHARS)
    cache_ok = True

    def process_bind_param(self, value: Decimal | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if not isinstance(value, Decimal):
            raise TypeError(f"money must be a Decimal, not {type(value).__name__} ({value!r})")
        if not value.is_finite():
            raise ValueError(f"money must be a finite amount, not {value}")
        text = str(value)
        if len(text) > MONEY_CHARS:
            raise ValueError(f"money {text} is longer than {MONEY_CHARS} characters")
        return text

    def process_result_value(self, value: str | None, dialect: Dialect) -> Decimal | None:
        return None if value is None else Decimal(value)
