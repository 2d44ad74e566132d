"""The tests' one fake clock. It moves only when the test says so and reads as each of gpuplex's
clocks does (src/gpuplex/clock.py): `seconds` as `now_s` and `monotonic_s` (seconds, a float),
`utc` as `utc_now` (an aware UTC datetime). A component takes the reading it needs as an argument
(`clock=fake.seconds`, `ServerContext.open(engine, fake.utc, ...)`); no test patches a module's
clock functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: Where a clock starts unless the test says: 2027-01-15 08:00 UTC, a round number of seconds.
DEFAULT_START_S = 1_800_000_000.0


class ManualClock:
    """A clock the test sets (`now_s`, `at`) and moves (`advance`); it never moves by itself."""

    def __init__(self, start: float | datetime = DEFAULT_START_S) -> None:
        self.now_s = start.timestamp() if isinstance(start, datetime) else float(start)

    def seconds(self) -> float:
        return self.now_s

    def utc(self) -> datetime:
        return datetime.fromtimestamp(self.now_s, UTC)

    @property
    def at(self) -> datetime:
        return self.utc()

    @at.setter
    def at(self, when: datetime) -> None:
        if when.tzinfo is None:
            raise ValueError(f"{when}: a clock reads aware UTC datetimes")
        self.now_s = when.timestamp()

    def advance(self, by: float | timedelta) -> None:
        self.now_s += by.total_seconds() if isinstance(by, timedelta) else by
