"""The one place that reads the clock. Everything else takes the time as an argument."""

from __future__ import annotations

import time
from datetime import UTC, datetime


def now_s() -> float:
    """Seconds since the epoch: persisted in host state, so it must survive a restart of gpuplex."""
    return time.time()


def monotonic_s() -> float:
    """Seconds on a clock that never steps (NTP, an operator's `date -s`): for durations and
    windows that live only in this process, such as rate-limit windows and leases."""
    return time.monotonic()


def utc_now() -> datetime:
    return datetime.now(UTC)


def sleep_s(seconds: float) -> None:
    time.sleep(seconds)
