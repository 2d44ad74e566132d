"""Restart policy: exponential backoff, crash-loop detection, health-check verdicts. Pure: the time
is an argument."""

from __future__ import annotations

from gpuplex.core.apply.model import ExitStatus, Phase, WorkloadRecord
from gpuplex.core.plural import counted
from gpuplex.core.spec.runtime import RestartPolicy, RestartSpec


def backoff_delay_s(restart: RestartSpec, exits_in_window: int) -> float:
    """initial, 2 x initial, 4 x initial ... capped at backoff_max_s; `exits_in_window` >= 1."""
    doublings = max(0, exits_in_window - 1)
    if doublings > 60:
        return float(restart.backoff_max_s)
    return float(min(restart.backoff_max_s, restart.backoff_initial_s * 2**doublings))


def after_exit(record: WorkloadRecord, exit_status: ExitStatus, now_s: float) -> WorkloadRecord:
    """The record of a replica whose process has just exited (or been stopped for cause)."""
    restart = record.desired.restart
    window_start = now_s - restart.window_s
    exits = [t for t in record.exits_at_s if t > window_start] + [now_s]
    described = exit_status.describe()
    common = {
        "pid": None,
        "start_ticks": None,
        "exits_at_s": exits,
        "last_exit": described,
        "last_exit_code": exit_status.shell_code(),
        "health_failures": 0,
        "cgroups": record.cgroups,
    }
    if restart.policy is RestartPolicy.NEVER or (
        restart.policy is RestartPolicy.ON_FAILURE and exit_status.code == 0
    ):
        return record.model_copy(
            update={
                **common,
                "phase": Phase.COMPLETED,
                "next_start_at_s": None,
                "message": described,
            }
        )
    if len(exits) > restart.max_restarts:
        message = (
            f"crash loop: {len(exits)} exits within {restart.window_s:g} s "
            f"(max_restarts {restart.max_restarts}); last: {described}. "
            "Fix it and apply the spec again."
        )
        return record.model_copy(
            update={**common, "phase": Phase.FAILED, "next_start_at_s": None, "message": message}
        )
    delay = backoff_delay_s(restart, len(exits))
    return record.model_copy(
        update={
            **common,
            "phase": Phase.BACKOFF,
            "next_start_at_s": now_s + delay,
            "message": f"{described}; restart in {delay:g} s",
        }
    )


#: How often a `starting` replica's health check runs at most: its first healthy answer makes it
#: `running` soon after it is ready.
STARTING_INTERVAL_S = 2.0


def check_interval_s(record: WorkloadRecord) -> float:
    """Seconds between a replica's health checks: `interval_s`, at most STARTING_INTERVAL_S while
    it has not answered yet. A replica without a health check is never checked."""
    health = record.desired.health
    if health is None:
        return float("inf")
    if record.phase is Phase.STARTING:
        return min(health.interval_s, STARTING_INTERVAL_S)
    return health.interval_s


def after_health_check(record: WorkloadRecord, ok: bool, now_s: float) -> WorkloadRecord:
    """Count a check. Readiness first: a replica is `starting` until its first success, which
    makes it `running`; failures before that never count (how long it may take is
    `start_timeout_s`, see `health_verdict`). Once it has been ready, failures in a row count."""
    if ok:
        return record.model_copy(
            update={
                "phase": Phase.RUNNING,
                "health_failures": 0,
                "health_checks": record.health_checks + 1,
                "healthy_at_s": now_s,
            }
        )
    never_ready = record.healthy_at_s is None
    failures = record.health_failures if never_ready else record.health_failures + 1
    return record.model_copy(
        update={"health_failures": failures, "health_checks": record.health_checks + 1}
    )


def health_verdict(record: WorkloadRecord, now_s: float) -> str | None:
    """Why the replica must be restarted for its health checks, or None: it has failed
    `failure_threshold` checks in a row since it was ready, or it has not been ready once within
    `start_timeout_s` of its start."""
    health = record.desired.health
    if health is None:
        return None
    if record.healthy_at_s is None:
        started = record.started_at_s
        if (
            record.phase is Phase.STARTING
            and started is not None
            and now_s - started >= health.start_timeout_s
        ):
            return (
                f"not ready within start_timeout_s ({health.start_timeout_s:g} s): its health "
                f"check never answered ({counted(record.health_checks, 'check')} made)"
            )
        return None
    if record.health_failures < health.failure_threshold:
        return None
    return f"health check failed {counted(record.health_failures, 'time')} in a row"
