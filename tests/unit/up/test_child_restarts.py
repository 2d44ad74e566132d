"""How `gpuplex up` restarts a child that died: 1 s, then doubling up to 30 s; a sixth death
within two minutes and it gives up; deaths further apart than that never add up."""

from __future__ import annotations

from gpuplex.up.children import RESTARTS, Crashes


def test_restarts_back_off_and_give_up_after_too_many_crashes_in_the_window() -> None:
    crashes = Crashes([])
    waits = [crashes.after_crash(float(t)) for t in range(5)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert crashes.after_crash(5.0) is None  # the sixth within the window


def test_crashes_far_apart_never_add_up() -> None:
    crashes = Crashes([])
    step = RESTARTS.window_s + 1
    assert all(crashes.after_crash(n * step) == 1.0 for n in range(20))
