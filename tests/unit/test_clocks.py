"""The shared fake clocks read as the real ones do (one `Clock` protocol), and move only when told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuplex.clock import SYSTEM_CLOCK, Clock, now_s, utc_now
from tests.clocks import AheadClock, ManualClock


def test_its_readings_have_the_real_clocks_types_and_agree_with_each_other() -> None:
    clock = ManualClock(datetime(2026, 3, 10, 12, 0, 0, 250_000, tzinfo=UTC))
    assert type(clock.now_s()) is type(now_s())
    assert type(clock.utc_now()) is type(utc_now())
    assert clock.utc_now().tzinfo is UTC
    assert clock.utc_now() == datetime(2026, 3, 10, 12, 0, 0, 250_000, tzinfo=UTC)
    assert clock.now_s() == clock.utc_now().timestamp()


def test_it_moves_only_when_told() -> None:
    clock = ManualClock(1000.0)
    assert clock.now_s() == clock.now_s() == 1000.0
    clock.advance(0.5)
    clock.advance(timedelta(minutes=1))
    assert clock.now_s() == 1060.5
    clock.at = datetime(2026, 1, 1, tzinfo=UTC)
    assert clock.utc_now() == datetime(2026, 1, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="aware UTC"):
        clock.at = datetime(2026, 1, 1)  # noqa: DTZ001 - the mistake under test


def test_the_fakes_and_the_system_clock_are_the_same_protocol() -> None:
    clocks: list[Clock] = [ManualClock(), AheadClock(), SYSTEM_CLOCK]  # mypy checks the shapes
    for clock in clocks:
        assert isinstance(clock.now_s(), float)
        assert isinstance(clock.monotonic_s(), float)
        assert clock.utc_now().tzinfo is UTC


def test_the_ahead_clock_is_the_real_one_moved_by_the_test() -> None:
    clock = AheadClock()
    clock.advance(timedelta(hours=1))
    ahead = clock.now_s() - now_s()
    assert 3599 < ahead <= 3600.5
    assert 3599 < (clock.utc_now() - utc_now()).total_seconds() <= 3600.5
    assert 3599 < clock.monotonic_s() - SYSTEM_CLOCK.monotonic_s() <= 3600.5
