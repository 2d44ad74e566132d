"""The issuer's keys, cached: discovery and the key set are fetched once; a token naming a key the
cache lacks makes one refetch (rotation followed), never more than one per `min_refresh_s` however
many made-up key ids arrive; an old cache is fetched again; a discovery document for another issuer,
a key set without keys, or an unreadable token are refused."""

from __future__ import annotations

from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from gpuplex.errors import ErrorCode, IdentityProviderUnavailable, OidcTokenError
from gpuplex.oidc.keys import IssuerKeys

ISSUER = "https://login.example.com"
DISCOVERY = f"{ISSUER}/.well-known/openid-configuration"
JWKS_URI = f"{ISSUER}/keys"
FIRST = RSAKey.generate_key(2048, parameters={"kid": "first"})
SECOND = RSAKey.generate_key(2048, parameters={"kid": "second"})


class Provider:
    """What the issuer publishes, and every URL asked for."""

    def __init__(self) -> None:
        self.keys = [FIRST]
        self.issuer = ISSUER
        self.asked: list[str] = []

    def __call__(self, url: str) -> dict[str, Any]:
        self.asked.append(url)
        if url == DISCOVERY:
            return {"issuer": self.issuer, "jwks_uri": JWKS_URI}
        assert url == JWKS_URI
        return {"keys": [k.as_dict(private=False) for k in self.keys]}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def token(key: RSAKey, kid: str | None = None) -> str:
    claims = {"iss": ISSUER, "aud": "gpuplex", "sub": "alice", "exp": 1_800_050_000}
    return jwt.encode({"alg": "RS256", "kid": kid or key.kid}, claims, key)


@pytest.fixture
def setup() -> tuple[Provider, Clock, IssuerKeys]:
    provider, clock = Provider(), Clock()
    return provider, clock, IssuerKeys(ISSUER, clock, fetch=provider, min_refresh_s=10)


def verify(keys: IssuerKeys, text: str) -> dict[str, Any]:
    return keys.verify(text, audience="gpuplex", skew_s=0)


def test_discovery_and_keys_are_fetched_once(setup: tuple[Provider, Clock, IssuerKeys]) -> None:
    provider, _, keys = setup
    for _ in range(5):
        assert verify(keys, token(FIRST))["sub"] == "alice"
    assert provider.asked == [DISCOVERY, JWKS_URI]


def test_a_rotated_key_is_followed_with_one_refetch(
    setup: tuple[Provider, Clock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    provider.keys = [SECOND]  # the provider rotates
    clock.now += 11
    assert verify(keys, token(SECOND))["sub"] == "alice"
    assert provider.asked == [DISCOVERY, JWKS_URI, JWKS_URI]
    with pytest.raises(OidcTokenError, match="signature"):  # the old key is gone
        verify(keys, token(FIRST))


def test_made_up_key_ids_refetch_at_most_once_per_interval(
    setup: tuple[Provider, Clock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    for n in range(50):
        with pytest.raises(OidcTokenError):
            verify(keys, token(FIRST, kid=f"made-up-{n}"))
    assert provider.asked.count(JWKS_URI) == 1  # within min_refresh_s of the first fetch
    clock.now += 11
    with pytest.raises(OidcTokenError):
        verify(keys, token(FIRST, kid="made-up-again"))
    assert provider.asked.count(JWKS_URI) == 2


def test_an_old_key_set_is_fetched_again(setup: tuple[Provider, Clock, IssuerKeys]) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    clock.now += 3600
    verify(keys, token(FIRST))
    assert provider.asked.count(JWKS_URI) == 2


def test_a_discovery_document_for_another_issuer_is_refused(
    setup: tuple[Provider, Clock, IssuerKeys],
) -> None:
    provider, _, keys = setup
    provider.issuer = "https://evil.example.com"
    with pytest.raises(IdentityProviderUnavailable, match="not this one") as refused:
        verify(keys, token(FIRST))
    assert refused.value.code is ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE
    assert refused.value.status == 503


def test_a_key_set_without_keys_and_a_token_that_is_not_a_jwt_are_refused(
    setup: tuple[Provider, Clock, IssuerKeys],
) -> None:
    _, clock, keys = setup
    with pytest.raises(OidcTokenError, match="not a signed JWT"):
        verify(keys, "gpt_abc_def")
    empty = IssuerKeys(
        ISSUER,
        clock,
        fetch=lambda url: {"issuer": ISSUER, "jwks_uri": JWKS_URI} if url == DISCOVERY else {},
    )
    with pytest.raises(IdentityProviderUnavailable, match="no keys"):
        verify(empty, token(FIRST))


def test_the_cached_key_set_is_had_without_a_fetch_or_not_at_all(
    setup: tuple[Provider, Clock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    assert keys.cached_key_set("first") is None  # nothing fetched yet: the caller must fetch
    assert provider.asked == []
    fetched = keys.key_set("first")
    assert keys.cached_key_set("first") is fetched
    assert keys.cached_key_set(None) is fetched
    # an unknown kid within min_refresh_s: the set as it is (the token will not verify)
    assert keys.cached_key_set("made-up") is fetched
    clock.now += 10
    assert keys.cached_key_set("made-up") is None  # a refetch is due
    assert keys.cached_key_set("first") is fetched
    assert len(provider.asked) == 2  # discovery and the key set, once
