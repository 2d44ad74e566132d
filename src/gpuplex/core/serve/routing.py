"""Which replica of a backend gets the next request: the least loaded one that is healthy and whose
circuit breaker lets requests through.

A breaker opens after `failure_threshold` consecutive failures (connection refused, timeout, 5xx),
stays open for `open_s`, then lets one trial request through (half-open): success closes it, failure
opens it again. A health check that fails marks the replica down; one that passes marks it up and
closes its breaker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True)
class ReplicaState:
    url: str
    in_flight: int = 0
    healthy: bool = True
    consecutive_failures: int = 0
    breaker: BreakerState = BreakerState.CLOSED
    opened_at_s: float = 0.0
    trial_in_flight: bool = False

    def available(self, now_s: float, open_s: float) -> bool:
        if not self.healthy:
            return False
        if self.breaker is BreakerState.OPEN:
            return now_s - self.opened_at_s >= open_s
        if self.breaker is BreakerState.HALF_OPEN:
            return not self.trial_in_flight
        return True


@dataclass(frozen=True, slots=True)
class BreakerSettings:
    failure_threshold: int
    open_s: float


def choose_replica(
    replicas: Sequence[ReplicaState], now_s: float, settings: BreakerSettings
) -> ReplicaState | None:
    """The available replica with the fewest requests in flight (first on ties), or None."""
    best: ReplicaState | None = None
    for replica in replicas:
        if replica.available(now_s, settings.open_s) and (
            best is None or replica.in_flight < best.in_flight
        ):
            best = replica
    if best is not None and best.breaker is BreakerState.OPEN:
        best.breaker = BreakerState.HALF_OPEN
    if best is not None and best.breaker is BreakerState.HALF_OPEN:
        best.trial_in_flight = True
    return best


def record_success(replica: ReplicaState) -> None:
    replica.consecutive_failures = 0
    replica.breaker = BreakerState.CLOSED
    replica.trial_in_flight = False


def record_failure(replica: ReplicaState, now_s: float, settings: BreakerSettings) -> None:
    replica.consecutive_failures += 1
    replica.trial_in_flight = False
    if (
        replica.breaker is BreakerState.HALF_OPEN
        or replica.consecutive_failures >= settings.failure_threshold
    ):
        replica.breaker = BreakerState.OPEN
        replica.opened_at_s = now_s


def record_health(replica: ReplicaState, healthy: bool) -> None:
    replica.healthy = healthy
    if healthy and replica.breaker is not BreakerState.CLOSED:
        record_success(replica)
