"""Replica choice and circuit breakers."""

from __future__ import annotations

from gpuplex.core.serve.routing import (
    BreakerSettings,
    BreakerState,
    ReplicaState,
    choose_replica,
    record_failure,
    record_health,
    record_success,
)

SETTINGS = BreakerSettings(failure_threshold=2, open_s=5.0)


def state(replica: ReplicaState) -> BreakerState:
    return replica.breaker


def test_least_loaded_healthy_replica_wins() -> None:
    replicas = [ReplicaState("a", in_flight=3), ReplicaState("b", in_flight=1), ReplicaState("c")]
    replicas[2].healthy = False
    chosen = choose_replica(replicas, 0.0, SETTINGS)
    assert chosen is not None
    assert chosen.url == "b"


def test_breaker_opens_then_lets_one_trial_through_then_closes() -> None:
    replica = ReplicaState("a")
    record_failure(replica, 0.0, SETTINGS)
    assert state(replica) is BreakerState.CLOSED
    record_failure(replica, 1.0, SETTINGS)
    assert state(replica) is BreakerState.OPEN
    assert choose_replica([replica], 3.0, SETTINGS) is None
    assert choose_replica([replica], 6.1, SETTINGS) is replica
    assert state(replica) is BreakerState.HALF_OPEN
    assert choose_replica([replica], 6.2, SETTINGS) is None  # one trial at a time
    record_success(replica)
    assert state(replica) is BreakerState.CLOSED


def test_failed_trial_opens_again() -> None:
    replica = ReplicaState("a")
    record_failure(replica, 0.0, SETTINGS)
    record_failure(replica, 0.0, SETTINGS)
    assert choose_replica([replica], 5.0, SETTINGS) is replica
    record_failure(replica, 5.0, SETTINGS)
    assert state(replica) is BreakerState.OPEN
    assert choose_replica([replica], 9.0, SETTINGS) is None


def test_passing_health_check_closes_the_breaker() -> None:
    replica = ReplicaState("a")
    for _ in range(2):
        record_failure(replica, 0.0, SETTINGS)
    record_health(replica, False)
    assert choose_replica([replica], 100.0, SETTINGS) is None
    record_health(replica, True)
    assert state(replica) is BreakerState.CLOSED
    assert choose_replica([replica], 100.0, SETTINGS) is replica
