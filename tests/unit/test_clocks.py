"""The shared fake clock reads as the real ones do, and moves only when told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuplex.clock import now_s, utc_now
from tests.clocks import ManualClock


def test_its_readings_have_the_real_clocks_types_and_agree_with_each_other() -> None:
    clock = ManualClock(datetime(2026, 3, 10, 12, 0, 0, 250_000, tzinfo=UTC))
    assert type(clock.seconds()) is type(now_s())
    assert type(clock.utc()) is type(utc_now())
    assert clock.utc().tzinfo is UTC
    assert clock.utc() == datetime(2026, 3, 10, 12, 0, 0, 250_000, tzinfo=UTC)
    assert clock.seconds() == clock.utc().timestamp()


def test_it_moves_only_when_told() -> None:
    clock = ManualClock(1000.0)
    assert clock.seconds() == clock.seconds() == 1000.0
    clock.advance(0.5)
    clock.advance(timedelta(minutes=1))
    assert clock.seconds() == 1060.5
    clock.at = datetime(2026, 1, 1, tzinfo=UTC)
    assert clock.utc() == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="aware UTC"):
        clock.at = datetime(2026, 1, 1)  # noqa: DTZ001 - the mistake under test
