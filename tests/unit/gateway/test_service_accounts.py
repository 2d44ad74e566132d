"""The gateway's service accounts: a token of a tenant's account is verified once and then taken
from the table of verified tokens (by its hash) while the tenant exists and the spec's settings
are those it was verified under; the first tokens of a burst make one key-set fetch, off the event
loop, which runs on meanwhile; a provider that cannot be read is 503 with Retry-After and is not
asked again before its backoff; a made-up `kid` within the refresh interval fetches nothing; an ID
token is refused. Through
the runtime: a refused token counts toward the address's failed checks like a bad key, and a
valid one gets in as a caller of its tenant with the tenant's limits and every model."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from gpuplex.clock import SYSTEM_CLOCK, Clock, now_s
from gpuplex.core.serve.limits import Limit, LimitKind
from gpuplex.core.serve.service_accounts import account_prefix
from gpuplex.core.spec.auth import OidcSpec
from gpuplex.errors import ErrorCode, IdentityProviderUnavailable
from gpuplex.gateway.api_errors import ApiError
from gpuplex.gateway.auth import KeyCache
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.gateway.service_accounts import ServiceAccounts
from gpuplex.oidc.keys import IssuerKeys, IssuerKeysCache
from gpuplex.store.keys import KeyRepository
from tests.clocks import ManualClock

ISSUER = "https://login.example.com"
JWKS_URI = f"{ISSUER}/keys"
GATEWAY_AUDIENCE = "urn:gpuplex:gateway"
KEY = RSAKey.generate_key(2048, parameters={"kid": "k1"})
TENANTS = frozenset({"acme", "globex"})


def oidc(**gateway: str) -> OidcSpec:
    return OidcSpec.model_validate(
        {
            "issuer": ISSUER,
            "client_id": "gpuplex",
            "audience": "urn:gpuplex:api",
            "gateway": {"tenant_claim": "gpuplex_tenant", "audience": GATEWAY_AUDIENCE, **gateway},
        }
    )


def token(sub: str = "svc-ci", kid: str = "k1", **changes: Any) -> str:
    claims = {
        "iss": ISSUER,
        "aud": GATEWAY_AUDIENCE,
        "sub": sub,
        "gpuplex_tenant": "acme",
        "exp": int(now_s()) + 600,
        **changes,
    }
    return jwt.encode({"alg": "RS256", "kid": kid}, claims, KEY)


class Provider:
    """The issuer's answers, counted; `delay_s` makes each one slow, `down` makes it fail."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.down = False
        self.asked: list[str] = []
        self.threads: set[int] = set()

    def __call__(self, url: str) -> dict[str, Any]:
        self.asked.append(url)
        self.threads.add(threading.get_ident())
        time.sleep(self.delay_s)
        if self.down:
            raise IdentityProviderUnavailable(f"{url}: connection refused")
        if url.endswith("/.well-known/openid-configuration"):
            return {"issuer": ISSUER, "jwks_uri": JWKS_URI}
        return {"keys": [KEY.as_dict(private=False)]}

    @property
    def key_set_fetches(self) -> int:
        return self.asked.count(JWKS_URI)


def accounts(provider: Provider, clock: Clock = SYSTEM_CLOCK) -> ServiceAccounts:
    return ServiceAccounts(IssuerKeysCache(clock, fetch=provider))


def test_a_verified_token_is_taken_from_the_table_until_its_tenant_or_settings_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    verifications: list[str] = []
    verify_with = IssuerKeys.verify_with

    def counted(self: IssuerKeys, keys: dict[str, Any], text: str, **how: Any) -> dict[str, Any]:
        verifications.append(text)
        return verify_with(self, keys, text, **how)

    monkeypatch.setattr(IssuerKeys, "verify_with", counted)
    service = accounts(Provider())
    text = token()

    async def scenario() -> None:
        found = await service.account(text, oidc(), TENANTS)
        assert found is not None
        assert (found.tenant, found.subject) == ("acme", "svc-ci")
        assert found.prefix == account_prefix(ISSUER, "svc-ci")
        for _ in range(5):
            assert await service.account(text, oidc(), TENANTS) == found
        assert len(verifications) == 1
        # acme is gone from the revision: refused at once, from the table
        assert await service.account(text, oidc(), frozenset({"globex"})) is None
        assert len(verifications) == 1
        # another audience in the spec: verified again, and refused
        assert await service.account(text, oidc(audience="urn:other"), TENANTS) is None
        assert len(verifications) == 2

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "text",
    [
        token(gpuplex_tenant="initech"),  # no such tenant
        token(gpuplex_tenant=None),
        token(aud="urn:gpuplex:api"),  # the control plane's audience
        token(exp=int(time.time()) - 3600),
        jwt.encode(
            {"alg": "RS256", "kid": "k1"},
            {"iss": ISSUER, "aud": GATEWAY_AUDIENCE, "sub": "x", "exp": 4_000_000_000},
            RSAKey.generate_key(2048, parameters={"kid": "k1"}),  # forged: another key
        ),
        "a.b.c",
    ],
    ids=["no-such-tenant", "no-tenant", "wrong-audience", "expired", "forged", "garbage"],
)
def test_tokens_that_do_not_hold_are_no_account(text: str) -> None:
    service = accounts(Provider())
    assert asyncio.run(service.account(text, oidc(), TENANTS)) is None


def test_without_the_gateway_section_no_token_is_an_account() -> None:
    spec = oidc().model_copy(update={"gateway": None})
    assert asyncio.run(accounts(Provider()).account(token(), spec, TENANTS)) is None


def test_a_burst_of_first_tokens_makes_one_fetch_off_the_event_loop() -> None:
    provider = Provider(delay_s=0.2)
    service = accounts(provider)
    tokens = [token(sub=f"svc-{n}") for n in range(10)]

    async def scenario() -> tuple[list[str | None], int]:
        ticks = 0
        done = asyncio.Event()

        async def ticking() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(ticking())
        found = await asyncio.gather(*(service.account(t, oidc(), TENANTS) for t in tokens))
        done.set()
        await ticker
        return [a.subject if a else None for a in found], ticks

    subjects, ticks = asyncio.run(scenario())
    assert subjects == [f"svc-{n}" for n in range(10)]
    assert provider.key_set_fetches == 1
    assert threading.get_ident() not in provider.threads  # fetched off the event loop
    assert ticks >= 10  # the loop went on while the (0.4 s) fetch ran


def test_an_unreadable_provider_is_503_and_not_asked_again_for_a_while() -> None:
    provider = Provider()
    provider.down = True
    clock = ManualClock(time.time())
    service = accounts(provider, clock)

    async def attempt() -> ApiError | str:
        try:
            found = await service.account(token(), oidc(), TENANTS)
        except ApiError as error:
            return error
        return found.tenant if found else "refused"

    first = asyncio.run(attempt())
    assert isinstance(first, ApiError)
    assert (first.code, first.status) == (ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, 503)
    asked = len(provider.asked)
    clock.advance(9.9)  # within the first backoff (the refresh interval, 10 s)
    again = asyncio.run(attempt())
    assert isinstance(again, ApiError)
    assert again.retry_after_s == 1
    assert len(provider.asked) == asked  # not asked again so soon
    provider.down = False
    clock.advance(0.2)
    assert asyncio.run(attempt()) == "acme"


def test_an_id_token_is_refused() -> None:
    service = accounts(Provider())
    id_token = token(nonce="n-0123")

    async def scenario() -> None:
        assert await service.account(token(), oidc(), TENANTS) is not None
        assert await service.account(id_token, oidc(), TENANTS) is None

    asyncio.run(scenario())


def test_a_made_up_kid_within_the_refresh_interval_fetches_nothing() -> None:
    provider = Provider()
    service = accounts(provider)

    async def scenario() -> None:
        assert await service.account(token(), oidc(), TENANTS) is not None
        for n in range(20):
            assert await service.account(token(kid=f"made-up-{n}"), oidc(), TENANTS) is None

    asyncio.run(scenario())
    assert provider.key_set_fetches == 1


def tenant_limits(tenant: str) -> tuple[Limit, ...]:
    return (Limit(f"tenant:{tenant}", LimitKind.REQUESTS, 60),)


def test_through_the_runtime_refused_tokens_count_as_failed_checks_and_a_valid_one_gets_in() -> (
    None
):
    keys = KeyCache(cast(KeyRepository, None), tenant_limits, failed_auth_per_min=2)
    runtime = SimpleNamespace(
        live=SimpleNamespace(oidc=oidc(), routes=SimpleNamespace(tenants=TENANTS)),
        service_accounts=accounts(Provider()),
        keys=keys,
    )
    authenticate = GatewayRuntime.authenticate

    async def codes(credential: str, times: int) -> list[str]:
        seen = []
        for _ in range(times):
            try:
                await authenticate(
                    cast(GatewayRuntime, runtime), f"Bearer {credential}".encode(), "10.0.0.9"
                )
                seen.append("ok")
            except ApiError as error:
                seen.append(str(error.code))
        return seen

    forged = token(gpuplex_tenant="initech")
    assert asyncio.run(codes(forged, 3)) == [
        "invalid_api_key",
        "invalid_api_key",
        "too_many_failed_auth",
    ]
    assert asyncio.run(codes(token(), 1)) == ["ok"]  # a valid token from that address gets in

    async def caller() -> Any:
        return await authenticate(cast(GatewayRuntime, runtime), f"Bearer {token()}".encode(), "x")

    found = asyncio.run(caller())
    assert (found.tenant, found.key_prefix) == ("acme", account_prefix(ISSUER, "svc-ci"))
    assert found.models == frozenset()  # every model of the tenant
    assert found.limits == tenant_limits("acme")
    assert (found.budget_block, found.expires_at_s) == (None, None)
