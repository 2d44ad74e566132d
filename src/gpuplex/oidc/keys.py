"""The identity provider's keys, as OpenID Connect Discovery publishes them: the discovery document
(`<issuer>/.well-known/openid-configuration`, whose `issuer` must be the issuer exactly) names the
key set (`jwks_uri`). Both are fetched off the request path and cached; a request never waits on
the provider while it holds anything another request needs.

- One fetch per issuer at a time, in a thread of its own: every request that needs it awaits that
  one (`key_set_for`, without holding a worker thread) or, on a thread, waits on it bounded
  (`key_set`). A lock guards the bookkeeping only, never the I/O.
- At most one fetch per `min_refresh_s` after a good one, whatever the `kid`s: a token naming a key
  the cached set lacks makes one refetch (the provider rotated its key); within `min_refresh_s`
  of a good fetch an unknown `kid` is refused at once (OidcTokenError), with no I/O.
- A failed fetch is remembered: the next is not tried before a backoff (`min_refresh_s`, doubling
  per failure in a row up to `max_backoff_s`); meanwhile requests that need a fetch are answered at
  once with IdentityProviderUnavailable (503) and the seconds to wait.
- A set `max_age_s` old is fetched again behind the requests, which keep verifying against the
  set they have (a key the provider withdrew stops verifying once the new set arrives); a set
  another `max_age_s` older still, because the provider cannot be read, is used no more.

Answers are bounded in size and time; a provider that cannot be read is IdentityProviderUnavailable
(503, retry), never a token's fault.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any

from joserfc.errors import JoseError
from joserfc.jws import extract_compact

from gpuplex.clock import Clock
from gpuplex.errors import IdentityProviderUnavailable, OidcTokenError
from gpuplex.http_client import call
from gpuplex.oidc.tokens import verified_claims

#: A discovery document or key set larger than this is not one.
MAX_ANSWER_BYTES = 1024 * 1024
#: The longest one read from the provider may stall, and the longest a whole answer may take.
TIMEOUT_S = 5.0
ANSWER_DEADLINE_S = 10.0

KeySet = dict[str, Any]


def fetch_json(url: str) -> dict[str, Any]:
    """GET `url` as a JSON object, bounded in size and time (a provider that sends a byte now
    and then is cut off too); IdentityProviderUnavailable when it cannot be had."""
    if not url.startswith(("https://", "http://")):
        raise IdentityProviderUnavailable(f"{url}: not an http(s) URL")
    try:
        answer = call(
            "GET",
            url,
            headers={"accept": "application/json"},
            timeout_s=TIMEOUT_S,
            deadline_s=ANSWER_DEADLINE_S,
            max_bytes=MAX_ANSWER_BYTES,
        )
    except OSError as error:
        raise IdentityProviderUnavailable(str(error)) from None
    if not answer.ok:
        raise IdentityProviderUnavailable(f"{url}: answered {answer.status}")
    if not answer.complete:
        raise IdentityProviderUnavailable(f"{url}: the answer is over {MAX_ANSWER_BYTES} bytes")
    try:
        data = json.loads(answer.body)
    except ValueError:
        raise IdentityProviderUnavailable(f"{url}: the answer is not JSON") from None
    if not isinstance(data, dict):
        raise IdentityProviderUnavailable(f"{url}: the answer is not a JSON object")
    return data


class IssuerKeys:
    """One issuer's discovery document and key set, cached; safe across threads and event loops."""

    def __init__(
        self,
        issuer: str,
        clock: Clock,
        *,
        fetch: Callable[[str], dict[str, Any]] = fetch_json,
        max_age_s: float = 3600.0,
        min_refresh_s: float = 10.0,
        max_backoff_s: float = 300.0,
        wait_s: float = TIMEOUT_S + ANSWER_DEADLINE_S,
    ) -> None:
        self.issuer = issuer
        self._clock = clock
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._min_refresh_s = min_refresh_s
        self._max_backoff_s = max_backoff_s
        self._wait_s = wait_s
        self._lock = threading.Lock()  # the bookkeeping below; never held across I/O
        self._discovery: dict[str, Any] | None = None
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")  # the last good fetch of the key set
        self._tried_at = float("-inf")  # the last fetch started
        self._failures = 0  # fetches failed in a row
        self._failure: str | None = None  # why the last one failed
        self._in_flight: Future[KeySet] | None = None

    # --- verifying -------------------------------------------------------------------------

    async def verified(self, token: str, *, audience: str, skew_s: int) -> dict[str, Any]:
        """The token's claims (tokens.verified_claims) from an event loop: awaits a fetch when
        the token needs one, holding no thread meanwhile."""
        keys = await self.key_set_for(kid_of(token))
        return self.verify_with(keys, token, audience=audience, skew_s=skew_s)

    def verify(self, token: str, *, audience: str, skew_s: int) -> dict[str, Any]:
        """The same from a thread: may wait on a fetch, at most `wait_s`."""
        keys = self.key_set(kid_of(token))
        return self.verify_with(keys, token, audience=audience, skew_s=skew_s)

    def verify_with(
        self, keys: KeySet, token: str, *, audience: str, skew_s: int
    ) -> dict[str, Any]:
        """The token's claims checked against `keys`: no I/O."""
        return verified_claims(
            token,
            keys,
            issuer=self.issuer,
            audience=audience,
            now_s=self._clock.now_s(),
            skew_s=skew_s,
        )

    # --- the key set -----------------------------------------------------------------------

    async def key_set_for(self, kid: str | None = None) -> KeySet:
        """The key set that can verify a token naming `kid`, from an event loop."""
        found = self.cached_or_fetch(kid)
        if not isinstance(found, Future):
            return found
        waiting = asyncio.shield(asyncio.wrap_future(found))
        try:
            return await asyncio.wait_for(waiting, self._wait_s)
        except TimeoutError:
            raise self._no_answer() from None

    def key_set(self, kid: str | None = None) -> KeySet:
        """The key set that can verify a token naming `kid`, from a thread (bounded wait)."""
        found = self.cached_or_fetch(kid)
        if not isinstance(found, Future):
            return found
        try:
            return found.result(timeout=self._wait_s)
        except FutureTimeout:
            raise self._no_answer() from None

    def cached_or_fetch(self, kid: str | None) -> KeySet | Future[KeySet]:
        """Never blocks: the cached set when it will do, else the fetch to wait for (the one in
        flight, or one started now). OidcTokenError for a `kid` the issuer did not publish at
        its last fetch, when that was too recent to fetch again; IdentityProviderUnavailable
        while a failed fetch's backoff runs."""
        with self._lock:
            now = self._clock.now_s()
            age = now - self._fetched_at
            known = self._keys is not None and (kid is None or _has_kid(self._keys, kid))
            if known and age < 2 * self._max_age_s:
                if age >= self._max_age_s and self._in_flight is None and now >= self._next_try():
                    self._start_fetch(now)  # refresh behind; this set serves meanwhile
                assert self._keys is not None
                return self._keys
            if self._in_flight is not None:
                return self._in_flight
            if now >= self._next_try():
                return self._start_fetch(now)
            wait_s = max(1, math.ceil(self._next_try() - now))
            if self._failure is not None:
                raise IdentityProviderUnavailable(
                    f"{self._failure} (tried again in {wait_s} s)", retry_after_s=wait_s
                )
            raise OidcTokenError(
                f"the token's key {kid!r} is not among the issuer's keys "
                f"(read {age:.0f} s ago; a rotation is followed at most every "
                f"{self._min_refresh_s:g} s)"
            )

    def endpoint(self, name: str) -> str:
        """An endpoint the discovery document names (`authorization_endpoint`, `token_endpoint`,
        ...), from a thread: fetched with the key set when not had yet."""
        if self._discovery is None:
            self.key_set()
        return self._endpoint(name)

    async def endpoint_for(self, name: str) -> str:
        """The same from an event loop."""
        if self._discovery is None:
            await self.key_set_for()
        return self._endpoint(name)

    # --- the fetch -------------------------------------------------------------------------

    def _next_try(self) -> float:
        if self._failures == 0:
            return self._tried_at + self._min_refresh_s
        backoff = self._min_refresh_s * 2.0 ** (self._failures - 1)
        return self._tried_at + min(backoff, self._max_backoff_s)

    def _start_fetch(self, now: float) -> Future[KeySet]:
        """With the lock held: a fetch in a thread of its own."""
        future: Future[KeySet] = Future()
        future.set_running_or_notify_cancel()  # a waiter giving up cannot cancel it for others
        self._in_flight = future
        self._tried_at = now
        threading.Thread(
            target=self._run_fetch, args=(future,), name="gpuplex-oidc-keys", daemon=True
        ).start()
        return future

    def _run_fetch(self, future: Future[KeySet]) -> None:
        try:
            discovery = self._discovery or self._fetch_discovery()
            keys = self._fetch(_endpoint_of(self.issuer, discovery, "jwks_uri"))
            if not isinstance(keys.get("keys"), list):
                raise IdentityProviderUnavailable(f"{self.issuer}: the key set has no keys")
        except Exception as error:  # whatever went wrong, no waiter may wait for ever
            failed = (
                error
                if isinstance(error, IdentityProviderUnavailable)
                else IdentityProviderUnavailable(f"{self.issuer}: {error}")
            )
            with self._lock:
                self._in_flight = None
                self._failures += 1
                self._failure = failed.message
            future.set_exception(failed)
            return
        with self._lock:
            self._discovery = discovery
            self._keys = keys
            self._fetched_at = self._clock.now_s()
            self._failures = 0
            self._failure = None
            self._in_flight = None
        future.set_result(keys)

    def _fetch_discovery(self) -> dict[str, Any]:
        discovery = self._fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
        if discovery.get("issuer") != self.issuer:
            raise IdentityProviderUnavailable(
                f"{self.issuer}: the discovery document names issuer "
                f"{discovery.get('issuer')!r}, not this one (OpenID Connect Discovery 4.3)"
            )
        return discovery

    def _endpoint(self, name: str) -> str:
        with self._lock:
            discovery = self._discovery
        if discovery is None:
            raise self._no_answer()
        return _endpoint_of(self.issuer, discovery, name)

    def _no_answer(self) -> IdentityProviderUnavailable:
        return IdentityProviderUnavailable(
            f"{self.issuer}: the identity provider did not answer within {self._wait_s:g} s",
            retry_after_s=max(1, math.ceil(self._min_refresh_s)),
        )


def _endpoint_of(issuer: str, discovery: dict[str, Any], name: str) -> str:
    found = discovery.get(name)
    if not isinstance(found, str) or not found.startswith(("https://", "http://")):
        raise IdentityProviderUnavailable(f"{issuer}: discovery names no {name}")
    return found


def kid_of(token: str) -> str | None:
    """The `kid` of a signed JWT's header; OidcTokenError when it is not one."""
    try:
        header = extract_compact(token.encode()).headers()
    except (JoseError, ValueError, TypeError):  # any unreadable token is refused the same way
        raise OidcTokenError("the token is not a signed JWT") from None
    kid = header.get("kid")
    return kid if isinstance(kid, str) else None


def _has_kid(keys: KeySet, kid: str) -> bool:
    return any(isinstance(k, dict) and k.get("kid") == kid for k in keys.get("keys", []))


class IssuerKeysCache:
    """One IssuerKeys per issuer, made on first use (the applied spec names the issuer)."""

    def __init__(self, clock: Clock, fetch: Callable[[str], dict[str, Any]] = fetch_json) -> None:
        self._clock = clock
        self._fetch = fetch
        self._lock = threading.Lock()
        self._by_issuer: dict[str, IssuerKeys] = {}

    def of(self, issuer: str) -> IssuerKeys:
        with self._lock:
            keys = self._by_issuer.get(issuer)
            if keys is None:
                keys = self._by_issuer[issuer] = IssuerKeys(issuer, self._clock, fetch=self._fetch)
            return keys
