"""The one place that reads the clock.

A component whose behaviour depends on the time takes a `Clock` (`clock: Clock = SYSTEM_CLOCK`),
so a test can hand it the suite's one fake (tests/clocks.py `ManualClock`) and move time itself;
the pure core takes the time as an argument. The module functions below are the system clock's
own readings, for the edges that only ever run on real time (a CLI command, a process's loop).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Final, Protocol


class Clock(Protocol):
    """The three readings gpuplex takes of the time."""

    def now_s(self) -> float:
        """Seconds since the epoch: persisted in host state, so it must survive a restart."""
        ...

    def monotonic_s(self) -> float:
        """Seconds on a clock that never steps (NTP, an operator's `date -s`): for durations and
        windows that live only in this process, such as rate-limit windows and leases."""
        ...

    def utc_now(self) -> datetime:
        """Now, as an aware UTC datetime."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now_s(self) -> float:
        return time.time()

    def monotonic_s(self) -> float:
        return time.monotonic()

    def utc_now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK: Final[Clock] = SystemClock()

now_s = SYSTEM_CLOCK.now_s
monotonic_s = SYSTEM_CLOCK.monotonic_s
utc_now = SYSTEM_CLOCK.utc_now


def sleep_s(seconds: float) -> None:
    time.sleep(seconds)
