"""The tests' one fake clock: a `gpuplex.clock.Clock` that moves only when the test says so. A
component takes it where it would take the system clock (`UsageSpool(..., clock=fake)`,
`ServerContext.open(engine, fake, ...)`); no test patches a module's clock functions.

Its three readings are one reading: `now_s` and `monotonic_s` give the same seconds, `utc_now`
the same instant as an aware UTC datetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuplex.clock import SYSTEM_CLOCK

#: Where a clock starts unless the test says: 2027-01-15 08:00 UTC, a round number of seconds.
DEFAULT_START_S = 1_800_000_000.0


class ManualClock:
    """A clock the test sets (`reading_s`, `at`) and moves (`advance`); it never moves by itself."""

    def __init__(self, start: float | datetime = DEFAULT_START_S) -> None:
        self.reading_s = start.timestamp() if isinstance(start, datetime) else float(start)

    def now_s(self) -> float:
        return self.reading_s

    def monotonic_s(self) -> float:
        return self.reading_s

    def utc_now(self) -> datetime:
        return datetime.fromtimestamp(self.reading_s, UTC)

    @property
    def at(self) -> datetime:
        return self.utc_now()

    @at.setter
    def at(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError(f"{when}: a clock reads aware UTC datetimes")
        self.reading_s = when.timestamp()

    def advance(self, by: float | timedelta) -> None:
        self.reading_s += by.total_seconds() if isinstance(by, timedelta) else by


class AheadClock:
    """The real clock, run ahead by what the test adds (`advance`): for a component that also
    waits in real time (a thread's interval) while the test skips its timeouts."""

    def __init__(self) -> None:
        self.ahead_s = 0.0

    def now_s(self) -> float:
        return SYSTEM_CLOCK.now_s() + self.ahead_s

    def monotonic_s(self) -> float:
        return SYSTEM_CLOCK.monotonic_s() + self.ahead_s

    def utc_now(self) -> datetime:
        return SYSTEM_CLOCK.utc_now() + timedelta(seconds=self.ahead_s)

    def advance(self, by: float | timedelta) -> None:
        self.ahead_s += by.total_seconds() if isinstance(by, timedelta) else by
