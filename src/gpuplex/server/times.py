"""Times the API accepts: timezone-aware, from 1970 to 8999 UTC. Times near the ends of Python's
datetime range (year 1 or 9999 with an offset) overflow when converted to UTC or moved by a
window, which answered 500; they are a 422 naming the field instead."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuplex.errors import ErrorCode
from gpuplex.server.problems import ApiProblem

EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def checked_time(at: datetime, field: str) -> datetime:
    """`at` if the API can work with it, else a 422 naming `field`."""
    try:
        utc = at.astimezone(UTC) if at.tzinfo is not None else None
    except OverflowError:
        utc = None
    if utc is None or not EARLIEST <= utc < LATEST:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST,
            f"{field}: give a time with a timezone from {EARLIEST.year} to {LATEST.year - 1} (UTC)",
            field=field,
        )
    return at
