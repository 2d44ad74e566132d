"""The issuer's keys, cached: discovery and the key set are fetched once, in a thread of their
own; a token naming a key the cache lacks makes one refetch (rotation followed), never more than
one per `min_refresh_s` however many made-up key ids arrive, and within it such a token is refused
with no I/O; a failed fetch is remembered and retried after a backoff that doubles; callers that
need a fetch share the one in flight, and wait on it at most `wait_s`; an old cache serves while it
is fetched again behind them; a discovery document for another issuer, a key set without keys, or
an unreadable token are refused."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from gpuplex.errors import ErrorCode, IdentityProviderUnavailable, OidcTokenError
from gpuplex.oidc.keys import IssuerKeys
from tests.clocks import ManualClock

ISSUER = "https://login.example.com"
DISCOVERY = f"{ISSUER}/.well-known/openid-configuration"
JWKS_URI = f"{ISSUER}/keys"
FIRST = RSAKey.generate_key(2048, parameters={"kid": "first"})
SECOND = RSAKey.generate_key(2048, parameters={"kid": "second"})


class Provider:
    """What the issuer publishes, and every URL asked for; `down` makes it fail."""

    def __init__(self) -> None:
        self.keys = [FIRST]
        self.issuer = ISSUER
        self.down = False
        self.asked: list[str] = []

    def __call__(self, url: str) -> dict[str, Any]:
        self.asked.append(url)
        if self.down:
            raise IdentityProviderUnavailable(f"{url}: connection refused")
        if url == DISCOVERY:
            return {"issuer": self.issuer, "jwks_uri": JWKS_URI}
        assert url == JWKS_URI
        return {"keys": [k.as_dict(private=False) for k in self.keys]}


def token(key: RSAKey, kid: str | None = None) -> str:
    claims = {"iss": ISSUER, "aud": "gpuplex", "sub": "alice", "exp": 1_800_050_000}
    return jwt.encode({"alg": "RS256", "kid": kid or key.kid}, claims, key)


@pytest.fixture
def setup() -> tuple[Provider, ManualClock, IssuerKeys]:
    provider, clock = Provider(), ManualClock()
    return provider, clock, IssuerKeys(ISSUER, clock, fetch=provider, min_refresh_s=10)


def settle(provider: Provider, key_set_fetches: int) -> None:
    """Wait for a fetch behind the requests to have asked the provider."""
    deadline = time.monotonic() + 10
    while provider.asked.count(JWKS_URI) < key_set_fetches and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # and for its answer to be taken
    assert provider.asked.count(JWKS_URI) == key_set_fetches


def verify(keys: IssuerKeys, text: str) -> dict[str, Any]:
    return keys.verify(text, audience="gpuplex", skew_s=0)


def test_discovery_and_keys_are_fetched_once(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, _, keys = setup
    for _ in range(5):
        assert verify(keys, token(FIRST))["sub"] == "alice"
    assert provider.asked == [DISCOVERY, JWKS_URI]


def test_a_rotated_key_is_followed_with_one_refetch(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    provider.keys = [SECOND]  # the provider rotates
    clock.advance(11)
    assert verify(keys, token(SECOND))["sub"] == "alice"
    assert provider.asked == [DISCOVERY, JWKS_URI, JWKS_URI]
    with pytest.raises(OidcTokenError, match="not among the issuer's keys"):  # the old key is gone
        verify(keys, token(FIRST))


def test_made_up_key_ids_refetch_at_most_once_per_interval(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    for n in range(50):
        with pytest.raises(OidcTokenError):
            verify(keys, token(FIRST, kid=f"made-up-{n}"))
    assert provider.asked.count(JWKS_URI) == 1  # within min_refresh_s of the first fetch
    with pytest.raises(OidcTokenError, match="not among the issuer's keys"):
        verify(keys, token(FIRST, kid="made-up"))
    clock.advance(11)
    with pytest.raises(OidcTokenError):
        verify(keys, token(FIRST, kid="made-up-again"))
    assert provider.asked.count(JWKS_URI) == 2


def test_an_old_key_set_serves_while_it_is_fetched_again_behind_the_requests(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    clock.advance(3600)
    provider.keys = [SECOND]  # the provider withdrew the first key
    assert verify(keys, token(FIRST))["sub"] == "alice"  # the set it has, meanwhile
    settle(provider, key_set_fetches=2)
    with pytest.raises(OidcTokenError):  # the new set arrived: the withdrawn key stops verifying
        verify(keys, token(FIRST))


def test_a_set_twice_too_old_is_not_used_when_the_provider_cannot_be_read(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    verify(keys, token(FIRST))
    provider.down = True
    clock.advance(7200)
    with pytest.raises(IdentityProviderUnavailable):
        verify(keys, token(FIRST))


def test_a_failed_fetch_is_remembered_and_retried_after_a_backoff_that_doubles(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, clock, keys = setup
    provider.down = True
    attempts: list[float] = []
    for _ in range(60):  # a request every second for a minute
        before = len(provider.asked)
        with pytest.raises(IdentityProviderUnavailable) as refused:
            verify(keys, token(FIRST))
        if len(provider.asked) > before:
            attempts.append(clock.reading_s - 1_800_000_000.0)
        else:
            assert refused.value.retry_after_s is not None
            assert 1 <= refused.value.retry_after_s <= 40
        clock.advance(1)
    assert attempts == [0, 10, 30]  # after 10 s, then 20 s; the next after 40 s more
    provider.down = False
    clock.reading_s = 1_800_000_000.0 + 70
    assert verify(keys, token(FIRST))["sub"] == "alice"
    clock.advance(1)
    with pytest.raises(OidcTokenError, match="not among"):  # a good fetch resets the backoff
        verify(keys, token(FIRST, kid="made-up"))


def test_callers_share_the_fetch_in_flight_and_wait_on_it_at_most_wait_s() -> None:
    release = threading.Event()
    asked: list[str] = []
    callers = set()

    def hung(url: str) -> dict[str, Any]:
        asked.append(url)
        callers.add(threading.get_ident())
        release.wait(10)
        return Provider()(url)

    keys = IssuerKeys(ISSUER, ManualClock(), fetch=hung, wait_s=0.3)

    async def flood() -> list[BaseException | dict[str, Any]]:
        return await asyncio.gather(
            *(keys.key_set_for(f"made-up-{n}") for n in range(50)), return_exceptions=True
        )

    answers = asyncio.run(flood())
    assert all(isinstance(a, IdentityProviderUnavailable) for a in answers)
    assert asked == [DISCOVERY]  # one fetch for all fifty, still hanging
    assert threading.get_ident() not in callers  # fetched off the caller's thread
    release.set()


def test_a_discovery_document_for_another_issuer_is_refused(
    setup: tuple[Provider, ManualClock, IssuerKeys],
) -> None:
    provider, _, keys = setup
    provider.issuer = "https://evil.example.com"
    with pytest.raises(IdentityProviderUnavailable, match="not this one") as refused:
        verify(keys, token(FIRST))
    assert refused.value.code is ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE
    assert refused.value.status == 503


def test_a_key_set_without_keys_and_a_token_that_is_not_a_jwt_are_refused(
    setup: tuple[Provider, ManualClock, IssuerKeys],
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
