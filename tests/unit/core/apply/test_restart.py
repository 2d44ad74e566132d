"""Restart policy: backoff, crash-loop detection, health-check counting."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.apply.model import ExitStatus, Phase, WorkloadRecord
from gpuplex.core.apply.restart import (
    after_exit,
    after_health_check,
    backoff_delay_s,
    check_interval_s,
    health_verdict,
)
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.runtime import RestartPolicy
from tests.unit.core.apply.factories import binding, health, record, restart, wanted

CRASHED = ExitStatus(code=1)


def replica(**restart_fields: object) -> WorkloadRecord:
    desired = wanted("api", binding(Mode.DEDICATED, 0), restart=restart(**restart_fields))
    return record(desired, Phase.RUNNING, pid=123, start_ticks=99, health_failures=2)


@pytest.mark.parametrize(
    ("initial", "maximum", "exits", "expected"),
    [
        (1, 60, 1, 1.0),
        (1, 60, 2, 2.0),
        (1, 60, 3, 4.0),
        (1, 60, 6, 32.0),
        (1, 60, 7, 60.0),  # 64 capped
        (1, 60, 5000, 60.0),  # huge counts do not overflow
        (0.5, 0.5, 4, 0.5),
        (3, 10, 2, 6.0),
        (3, 10, 3, 10.0),
        (2, 60, 0, 2.0),  # "no exit yet" still waits the initial delay
    ],
)
def test_backoff_doubles_from_initial_and_caps(
    initial: float, maximum: float, exits: int, expected: float
) -> None:
    spec = restart(backoff_initial_s=initial, backoff_max_s=maximum)
    assert backoff_delay_s(spec, exits) == expected


@given(
    initial=st.integers(1, 100),
    extra=st.integers(0, 5000),
    exits=st.integers(1, 200),
)
def test_backoff_matches_the_formula(initial: int, extra: int, exits: int) -> None:
    spec = restart(backoff_initial_s=initial, backoff_max_s=initial + extra)
    delay = backoff_delay_s(spec, exits)
    assert delay == min(initial + extra, initial * 2 ** (exits - 1))
    assert backoff_delay_s(spec, exits + 1) >= delay


def test_exit_goes_to_backoff_until_now_plus_delay() -> None:
    before = replica(backoff_initial_s=2, backoff_max_s=100, max_restarts=10)
    after = after_exit(before, CRASHED, now_s=1000.0)
    assert after.phase is Phase.BACKOFF
    assert after.next_start_at_s == 1002.0
    assert after.exits_at_s == [1000.0]
    assert (after.pid, after.start_ticks, after.health_failures) == (None, None, 0)
    assert after.last_exit == "exit code 1"
    assert after.message is not None
    assert "restart in 2 s" in after.message

    again = after_exit(after.model_copy(update={"phase": Phase.RUNNING}), CRASHED, now_s=1010.0)
    assert again.phase is Phase.BACKOFF
    assert again.exits_at_s == [1000.0, 1010.0]
    assert again.next_start_at_s == 1014.0


@pytest.mark.parametrize(
    ("policy", "status", "phase"),
    [
        (RestartPolicy.ALWAYS, ExitStatus(code=0), Phase.BACKOFF),
        (RestartPolicy.ALWAYS, ExitStatus(code=1), Phase.BACKOFF),
        (RestartPolicy.ON_FAILURE, ExitStatus(code=0), Phase.COMPLETED),
        (RestartPolicy.ON_FAILURE, ExitStatus(code=1), Phase.BACKOFF),
        (RestartPolicy.ON_FAILURE, ExitStatus(signal=9), Phase.BACKOFF),
        (RestartPolicy.ON_FAILURE, ExitStatus(note="stopped by the VRAM watchdog"), Phase.BACKOFF),
        (RestartPolicy.NEVER, ExitStatus(code=0), Phase.COMPLETED),
        (RestartPolicy.NEVER, ExitStatus(code=3), Phase.COMPLETED),
        (RestartPolicy.NEVER, ExitStatus(signal=11), Phase.COMPLETED),
    ],
)
def test_restart_policy(policy: RestartPolicy, status: ExitStatus, phase: Phase) -> None:
    after = after_exit(replica(policy=policy), status, now_s=50.0)
    assert after.phase is phase
    assert (after.next_start_at_s is None) == (phase is Phase.COMPLETED)


def test_more_than_max_restarts_within_the_window_is_a_crash_loop() -> None:
    current = replica(max_restarts=3, window_s=100, backoff_initial_s=1)
    for now in (10.0, 20.0, 30.0):
        current = after_exit(current, CRASHED, now)
        assert current.phase is Phase.BACKOFF, now
    failed = after_exit(current, ExitStatus(signal=6), 40.0)
    assert failed.phase is Phase.FAILED
    assert failed.next_start_at_s is None
    assert failed.message is not None
    assert "crash loop" in failed.message
    assert "4 exits within 100 s" in failed.message
    assert "killed by signal 6" in failed.message


def test_exits_older_than_the_window_are_forgotten() -> None:
    current = replica(max_restarts=1, window_s=60)
    for now in (0.0, 61.0, 122.5, 500.0, 10_000.0):
        current = after_exit(current, CRASHED, now)
        assert current.phase is Phase.BACKOFF
        assert current.exits_at_s == [now]
    squeezed = after_exit(current, CRASHED, 10_059.0)
    assert squeezed.phase is Phase.FAILED


@settings(max_examples=200)
@given(
    gaps=st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=30),
    max_restarts=st.integers(0, 6),
    window=st.integers(1, 120),
)
def test_fails_exactly_when_too_many_exits_fall_in_the_window(
    gaps: list[float], max_restarts: int, window: int
) -> None:
    """Reference model: the replica fails at the first exit after which more than max_restarts
    exits lie in (now - window_s, now]; until then it backs off."""
    current = replica(max_restarts=max_restarts, window_s=window)
    times: list[float] = []
    now = 0.0
    for gap in gaps:
        now += gap
        times.append(now)
        current = after_exit(current, CRASHED, now)
        in_window = [t for t in times if t > now - window]
        if len(in_window) > max_restarts:
            assert current.phase is Phase.FAILED
            return
        assert current.phase is Phase.BACKOFF
        assert current.exits_at_s == in_window
        assert current.next_start_at_s == now + backoff_delay_s(
            current.desired.restart, len(in_window)
        )


@given(st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_a_replica_crashing_rarely_never_fails(offsets: list[float]) -> None:
    current = replica(max_restarts=1, window_s=60)
    now = 0.0
    for offset in offsets:
        now += 61.0 + offset  # always more than a whole window after the previous exit
        current = after_exit(current, CRASHED, now)
        assert current.phase is Phase.BACKOFF


# --- health checks ---------------------------------------------------------------------------------


def checked(start_timeout_s: float = 300.0, threshold: int = 3) -> WorkloadRecord:
    desired = wanted(
        "api",
        binding(Mode.DEDICATED, 0),
        health=health(start_timeout_s=start_timeout_s, failure_threshold=threshold),
    )
    return record(desired, Phase.STARTING, started_at_s=100.0)


def run_checks(current: WorkloadRecord, checks: list[tuple[float, bool]]) -> WorkloadRecord:
    for now, ok in checks:
        current = after_health_check(current, ok, now)
    return current


@pytest.mark.parametrize(
    ("checks", "failures", "phase"),
    [
        # a model server loading its weights: never counted while it has not been ready once
        ([(110.0, False), (120.0, False), (129.9, False)], 0, Phase.STARTING),
        ([(110.0 + 10 * n, False) for n in range(30)], 0, Phase.STARTING),
        ([(105.0, True), (110.0, False), (115.0, False)], 2, Phase.RUNNING),
        ([(105.0, True), (110.0, False), (115.0, True)], 0, Phase.RUNNING),
        ([(180.0, False), (190.0, True), (200.0, False)], 1, Phase.RUNNING),
    ],
)
def test_failures_count_only_once_the_replica_has_been_ready(
    checks: list[tuple[float, bool]], failures: int, phase: Phase
) -> None:
    after = run_checks(checked(), checks)
    assert after.health_failures == failures
    assert after.phase is phase
    assert after.health_checks == len(checks)


def test_success_marks_running_and_healthy() -> None:
    after = after_health_check(checked(), True, 101.5)
    assert (after.phase, after.healthy_at_s, after.health_failures) == (Phase.RUNNING, 101.5, 0)


@pytest.mark.parametrize("threshold", [1, 2, 5])
def test_verdict_fires_at_the_failure_threshold_after_readiness(threshold: int) -> None:
    current = after_health_check(checked(threshold=threshold), True, 150.0)
    for n in range(1, threshold):
        current = after_health_check(current, False, 200.0 + n)
        assert health_verdict(current, 200.0 + n) is None
    current = after_health_check(current, False, 300.0)
    verdict = health_verdict(current, 300.0)
    times = "time" if threshold == 1 else "times"
    assert verdict == f"health check failed {threshold} {times} in a row"


def test_a_replica_never_ready_is_restarted_at_its_start_timeout_and_not_before() -> None:
    """vLLM takes a minute or more to answer /health: the default waits ten minutes for it."""
    current = run_checks(
        checked(start_timeout_s=120.0), [(100.0 + 2 * n, False) for n in range(60)]
    )
    assert health_verdict(current, 219.9) is None
    verdict = health_verdict(current, 220.0)
    assert verdict == (
        "not ready within start_timeout_s (120 s): its health check never answered (60 checks made)"
    )
    ready = after_health_check(current, True, 219.0)
    assert health_verdict(ready, 500.0) is None  # ready once: the start timeout is over


def test_the_default_start_timeout_waits_minutes() -> None:
    assert health().start_timeout_s == 600.0
    assert health_verdict(checked(start_timeout_s=health().start_timeout_s), 100.0 + 599) is None


def test_no_health_check_means_no_verdict() -> None:
    current = record(wanted("api", binding(Mode.DEDICATED, 0)), health_failures=50)
    assert health_verdict(current, 1e9) is None


def test_a_starting_replica_is_checked_every_two_seconds_at_most() -> None:
    starting = checked()  # interval_s 10 (the default)
    assert check_interval_s(starting) == 2.0
    assert check_interval_s(after_health_check(starting, True, 101.0)) == 10.0
    assert check_interval_s(record(wanted("api", binding(Mode.DEDICATED, 0)))) == float("inf")
