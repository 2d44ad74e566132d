"""The identity provider's keys, as OpenID Connect Discovery publishes them: the discovery document
(`<issuer>/.well-known/openid-configuration`, whose `issuer` must be the issuer exactly) names the
key set (`jwks_uri`), fetched on first use and cached.

Key rotation is followed: a token whose `kid` is not in the cached set makes one refetch (the
provider has published a new key), at most once every `min_refresh_s`, so a flood of tokens with
made-up `kid`s cannot make gpuplex hammer the provider; the set is also fetched again once it is
`max_age_s` old (a key the provider withdrew stops verifying). Answers are bounded in size and
time; a provider that cannot be read is IdentityProviderUnavailable (503, retry), never a token's
fault.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from joserfc.errors import JoseError
from joserfc.jws import extract_compact

from gpuplex.errors import IdentityProviderUnavailable, OidcTokenError
from gpuplex.oidc.tokens import verified_claims

#: A discovery document or key set larger than this is not one.
MAX_ANSWER_BYTES = 1024 * 1024
TIMEOUT_S = 5.0


def fetch_json(url: str) -> dict[str, Any]:
    """GET `url` as a JSON object, bounded; IdentityProviderUnavailable when it cannot be had."""
    if not url.startswith(("https://", "http://")):
        raise IdentityProviderUnavailable(f"{url}: not an http(s) URL")
    request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
            body = reply.read(MAX_ANSWER_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise IdentityProviderUnavailable(f"{url}: {error}") from None
    if len(body) > MAX_ANSWER_BYTES:
        raise IdentityProviderUnavailable(f"{url}: the answer is over {MAX_ANSWER_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError:
        raise IdentityProviderUnavailable(f"{url}: the answer is not JSON") from None
    if not isinstance(data, dict):
        raise IdentityProviderUnavailable(f"{url}: the answer is not a JSON object")
    return data


class IssuerKeys:
    """One issuer's discovery document and key set, cached; safe across threads."""

    def __init__(
        self,
        issuer: str,
        clock: Callable[[], float],
        *,
        fetch: Callable[[str], dict[str, Any]] = fetch_json,
        max_age_s: float = 3600.0,
        min_refresh_s: float = 10.0,
    ) -> None:
        self.issuer = issuer
        self._clock = clock
        self._fetch = fetch
        self._max_age_s = max_age_s
        self._min_refresh_s = min_refresh_s
        self._lock = threading.Lock()
        self._discovery: dict[str, Any] | None = None
        self._keys: dict[str, Any] | None = None
        self._fetched_at = float("-inf")

    def verify(self, token: str, *, audience: str, skew_s: int) -> dict[str, Any]:
        """The token's claims (see tokens.verified_claims), with the key set refetched once
        when the token names a key the cached set lacks."""
        keys = self.key_set(kid_of(token))
        return self.verify_with(keys, token, audience=audience, skew_s=skew_s)

    def verify_with(
        self, keys: dict[str, Any], token: str, *, audience: str, skew_s: int
    ) -> dict[str, Any]:
        """The token's claims checked against `keys` (from key_set or cached_key_set): no I/O."""
        return verified_claims(
            token, keys, issuer=self.issuer, audience=audience, now_s=self._clock(), skew_s=skew_s
        )

    def key_set(self, kid: str | None = None) -> dict[str, Any]:
        """The key set, fetched first when it is stale or lacks `kid` (and may be refetched):
        may block on the provider for up to TIMEOUT_S per request made."""
        with self._lock:
            now = self._clock()
            if self._must_fetch(kid, now):
                self._keys = self._fetch(self._jwks_location())
                if not isinstance(self._keys.get("keys"), list):
                    self._keys = None
                    raise IdentityProviderUnavailable(f"{self.issuer}: the key set has no keys")
                self._fetched_at = now
            assert self._keys is not None
            return self._keys

    def endpoint(self, name: str) -> str:
        """An endpoint the discovery document names (`authorization_endpoint`,
        `token_endpoint`, ...); IdentityProviderUnavailable when it names none."""
        with self._lock:
            return self._endpoint(name)

    def cached_key_set(self, kid: str | None = None) -> dict[str, Any] | None:
        """The key set when `key_set(kid)` would answer without fetching, else None: what an
        event loop may call. It never waits, not even for the lock a fetch in progress holds
        (None then: the fetch is what the caller needs)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return None if self._must_fetch(kid, self._clock()) else self._keys
        finally:
            self._lock.release()

    def _must_fetch(self, kid: str | None, now: float) -> bool:
        stale = self._keys is None or now - self._fetched_at >= self._max_age_s
        unknown = kid is not None and not _has_kid(self._keys, kid)
        may_refresh = now - self._fetched_at >= self._min_refresh_s
        return stale or (unknown and may_refresh)

    def _jwks_location(self) -> str:
        return self._endpoint("jwks_uri")

    def _endpoint(self, name: str) -> str:
        if self._discovery is None:
            discovery = self._fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
            if discovery.get("issuer") != self.issuer:
                raise IdentityProviderUnavailable(
                    f"{self.issuer}: the discovery document names issuer "
                    f"{discovery.get('issuer')!r}, not this one (OpenID Connect Discovery 4.3)"
                )
            self._discovery = discovery
        found = self._discovery.get(name)
        if not isinstance(found, str) or not found.startswith(("https://", "http://")):
            raise IdentityProviderUnavailable(f"{self.issuer}: discovery names no {name}")
        return found


def kid_of(token: str) -> str | None:
    """The `kid` of a signed JWT's header; OidcTokenError when it is not one."""
    try:
        header = extract_compact(token.encode()).headers()
    except (JoseError, ValueError, TypeError):  # any unreadable token is refused the same way
        raise OidcTokenError("the token is not a signed JWT") from None
    kid = header.get("kid")
    return kid if isinstance(kid, str) else None


def _has_kid(keys: dict[str, Any] | None, kid: str) -> bool:
    if keys is None:
        return False
    return any(isinstance(k, dict) and k.get("kid") == kid for k in keys.get("keys", []))


class IssuerKeysCache:
    """One IssuerKeys per issuer, made on first use (the applied spec names the issuer)."""

    def __init__(
        self, clock: Callable[[], float], fetch: Callable[[str], dict[str, Any]] = fetch_json
    ) -> None:
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
