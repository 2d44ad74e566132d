"""Failed credentials and failed sign-ins on the control plane, counted per client address.

A failure is a bearer token that does not verify, a dashboard session cookie that names no live
session (both on /api/v1, in the routes and in the body guard), or a sign-in callback that signs
nobody in (a state unknown, expired or of another browser, a code the provider refuses, a token
that does not verify, groups that give no role). A request that presents no credentials at all
is answered 401 and not counted: it costs no check and guesses nothing.

Past `failures_per_min` (20) failures from one address within its minute (a fixed window that
opens at its first failure), the address's further failures are answered 429
`too_many_failed_auth` instead of 401, with `Retry-After` (when the minute ends). Credentials that
hold are always taken, as at the gateway: a client behind the same NAT or proxy as someone failing
(an office, a CI system) is never locked out by them. Sign-in callbacks are the exception: a
throttled address's callbacks get the 429 before the state is even looked up, since a callback
costs an exchange with the provider. Other addresses are never slowed by it. The address is the
request's client (`client_address`), an IPv6 address counted by its /64.

The counting is `gpuplex.core.serve.failed_auth.FailedAttempts`, the gateway's: at most
`max_addresses` (100,000) addresses are tracked, the oldest window dropped first, so an attacker
cycling through addresses cannot grow it (dropping a window forgets that address's failures: it
may fail again). One lock makes it safe to use from the threads that run the routes and from the
event loop (the body guard); the clock is monotonic and injected.
"""

from __future__ import annotations

import math
import threading

from starlette.requests import HTTPConnection

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.failed_auth import FailedAttempts
from gpuplex.errors import ErrorCode
from gpuplex.http_limits import client_key
from gpuplex.server.problems import ApiProblem

FAILURES_PER_MIN = 20
MAX_ADDRESSES = 100_000


def client_address(connection: HTTPConnection) -> str:
    """The address a request counts against: its client's (uvicorn sets it from
    X-Forwarded-For only for the proxies it trusts), an IPv6 address's /64."""
    return client_key(connection.client)


class FailureThrottle:
    def __init__(
        self,
        failures_per_min: int = FAILURES_PER_MIN,
        *,
        max_addresses: int = MAX_ADDRESSES,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.failures_per_min = failures_per_min
        self._attempts = FailedAttempts(failures_per_min, max_addresses)
        self._clock = clock
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many addresses are tracked now."""
        with self._lock:
            return len(self._attempts)

    def refusal(self, address: str) -> ApiProblem | None:
        """The 429 for `address` while it is throttled, else None."""
        with self._lock:
            wait_s = self._attempts.throttled_for_s(address, self._clock.monotonic_s())
        if wait_s <= 0:
            return None
        retry_after_s = max(1, math.ceil(wait_s))
        return ApiProblem(
            ErrorCode.TOO_MANY_FAILED_AUTH,
            f"more than {self.failures_per_min} failed sign-ins or credentials from this address "
            f"in a minute: try again in {retry_after_s} s",
            retry_after_s=retry_after_s,
        )

    def refuse_if_throttled(self, address: str) -> None:
        """Raise the 429 for `address` while it is throttled."""
        refused = self.refusal(address)
        if refused is not None:
            raise refused

    def failed(self, address: str) -> None:
        """One more failure from `address`."""
        with self._lock:
            self._attempts.record(address, self._clock.monotonic_s())

    def answer_to_failure(self, address: str, refusal: ApiProblem) -> ApiProblem:
        """Count a failure from `address`: the answer to give is `refusal` (401), or the 429
        once the address is past its failures."""
        past = self.refusal(address)  # the address was past its failures before this one
        self.failed(address)
        return past or refusal
