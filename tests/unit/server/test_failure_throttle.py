"""The control plane's failure throttle, on a clock the test moves: past 20 failures in an
address's minute that address is refused with 429 and `Retry-After` until the minute ends, others
never; it tracks a bounded number of addresses however many an attacker uses, from many threads
at once; an IPv6 client counts by its /64."""

from __future__ import annotations

import threading

import pytest
from starlette.requests import Request

from gpuplex.errors import ErrorCode
from gpuplex.server.failure_throttle import FAILURES_PER_MIN, FailureThrottle, client_address
from gpuplex.server.problems import ApiProblem, problem_response
from tests.clocks import ManualClock


def test_past_20_failures_an_address_waits_out_its_minute_and_others_do_not() -> None:
    clock = ManualClock(1000.0)
    throttle = FailureThrottle(clock=clock)
    assert FAILURES_PER_MIN == 20
    for _ in range(20):
        throttle.refuse_if_throttled("192.0.2.1")
        throttle.failed("192.0.2.1")
    clock.advance(15.5)
    refused = throttle.refusal("192.0.2.1")
    assert refused is not None
    assert (refused.code, refused.status, refused.retry_after_s) == (
        ErrorCode.TOO_MANY_FAILED_AUTH,
        429,
        45,  # the minute began with the first failure; rounded up
    )
    assert "try again in 45 s" in refused.message
    with pytest.raises(ApiProblem):
        throttle.refuse_if_throttled("192.0.2.1")
    assert throttle.refusal("192.0.2.2") is None  # another address is not slowed
    clock.advance(44.4)
    assert throttle.refusal("192.0.2.1") is not None
    clock.advance(0.1)
    assert throttle.refusal("192.0.2.1") is None  # the minute has passed


def test_19_failures_leave_an_address_unthrottled() -> None:
    throttle = FailureThrottle(clock=ManualClock(1000.0))
    for _ in range(19):
        throttle.failed("192.0.2.1")
    assert throttle.refusal("192.0.2.1") is None


def test_the_refusal_carries_retry_after_as_a_header_and_a_stable_code() -> None:
    clock = ManualClock(1000.0)
    throttle = FailureThrottle(2, clock=clock)
    throttle.failed("192.0.2.1")
    throttle.failed("192.0.2.1")
    refused = throttle.refusal("192.0.2.1")
    assert refused is not None
    reply = problem_response(refused)
    assert reply.status_code == 429
    assert reply.headers["retry-after"] == "60"
    assert b'"code":"too_many_failed_auth"' in reply.body


def test_tracked_addresses_stay_bounded_from_many_threads_at_once() -> None:
    clock = ManualClock(1000.0)
    throttle = FailureThrottle(clock=clock, max_addresses=500)

    def fail_from_many(worker: int) -> None:
        for n in range(2_000):
            throttle.failed(f"10.{worker}.{n >> 8}.{n & 255}")
            throttle.refusal(f"10.{worker}.0.0")

    workers = [threading.Thread(target=fail_from_many, args=(w,)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(throttle) == 500
    clock.advance(61)
    throttle.failed("192.0.2.1")
    assert len(throttle) == 1  # the expired windows have gone


def request_from(host: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/", "headers": [], "client": (host, 1)}
    )


def test_an_ipv6_client_counts_by_its_64_and_an_ipv4_one_by_its_address() -> None:
    same_host = [client_address(request_from(f"2001:db8:1:2::{n:x}")) for n in (1, 0xBEEF)]
    assert same_host[0] == same_host[1]
    assert client_address(request_from("2001:db8:1:3::1")) != same_host[0]
    assert client_address(request_from("::ffff:192.0.2.1")) == "192.0.2.1"
    assert client_address(request_from("192.0.2.1")) != client_address(request_from("192.0.2.2"))


def test_failures_get_their_401_up_to_the_bound_and_429_past_it() -> None:
    throttle = FailureThrottle(clock=ManualClock(1_000.0))
    unauthenticated = ApiProblem(ErrorCode.UNAUTHENTICATED, "the token is unknown")
    answers = [throttle.answer_to_failure("192.0.2.1", unauthenticated) for _ in range(22)]
    assert [a.code for a in answers] == [ErrorCode.UNAUTHENTICATED] * 20 + [
        ErrorCode.TOO_MANY_FAILED_AUTH
    ] * 2
    assert answers[-1].retry_after_s == 60
    assert throttle.answer_to_failure("192.0.2.2", unauthenticated) is unauthenticated
