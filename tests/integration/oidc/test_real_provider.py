"""gpuplex's token check against a real, certified OpenID provider (oidc-provider on loopback): a
service account's access token, fetched with the client credentials grant, verifies against the
keys the provider publishes and its groups become roles; after the provider rotates its signing key
the old token no longer verifies and a new one does; a token from another provider is refused."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.core.access import Role
from gpuplex.core.access.oidc_groups import Grant, GroupRule, grants_of
from gpuplex.errors import OidcTokenError
from gpuplex.oidc.keys import IssuerKeys
from gpuplex.oidc.tokens import verified_claims
from tests.oidc.provider import AUDIENCE, OidcProvider, provider_or_skip, signing_key

SECRET = "contoso-service-account-secret-0123456789"  # noqa: S105 - a test client's secret
CLIENT = {
    "client_id": "svc-contoso",
    "client_secret": SECRET,
    "grant_types": ["client_credentials"],
    "redirect_uris": [],
    "response_types": [],
}
RULES = [GroupRule("gpu-{tenant}-admins", Role.TENANT_ADMIN)]


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    node = provider_or_skip()
    running = OidcProvider(
        tmp_path, [signing_key("first")], [CLIENT], {"svc-contoso": ["gpu-contoso-admins"]}
    )
    running.start(node)
    try:
        yield running
    finally:
        running.stop()


def check(provider: OidcProvider, token: str, issuer: str | None = None) -> dict[str, object]:
    return verified_claims(
        token,
        provider.jwks(),
        issuer=issuer or provider.issuer,
        audience=AUDIENCE,
        now_s=time.time(),
        skew_s=60,
    )


def test_a_service_accounts_token_verifies_and_its_groups_become_roles(
    provider: OidcProvider,
) -> None:
    claims = check(provider, provider.client_token("svc-contoso", SECRET))
    assert claims["sub"] == "svc-contoso"
    groups = claims["groups"]
    assert isinstance(groups, list)
    assert grants_of(groups, RULES, {"contoso", "fabrikam"}) == [
        Grant(Role.TENANT_ADMIN, "contoso")
    ]


def test_after_the_provider_rotates_its_key_the_old_token_is_refused(
    provider: OidcProvider,
) -> None:
    old = provider.client_token("svc-contoso", SECRET)
    provider.stop()
    provider.keys = [signing_key("second")]  # the first key is gone from its key set
    provider.start(provider_or_skip())
    with pytest.raises(OidcTokenError, match="signature"):
        check(provider, old)
    assert check(provider, provider.client_token("svc-contoso", SECRET))["sub"] == "svc-contoso"


def test_a_token_from_another_provider_is_refused(provider: OidcProvider, tmp_path: Path) -> None:
    other = OidcProvider(tmp_path, [signing_key("other")], [CLIENT])
    other.start(provider_or_skip())
    try:
        foreign = other.client_token("svc-contoso", SECRET)
        with pytest.raises(OidcTokenError, match="signature"):  # not signed by our issuer's keys
            check(provider, foreign)
        with pytest.raises(OidcTokenError, match="claims"):  # its own keys, but not our issuer
            verified_claims(
                foreign,
                other.jwks(),
                issuer=provider.issuer,
                audience=AUDIENCE,
                now_s=time.time(),
                skew_s=60,
            )
    finally:
        other.stop()


def test_gpuplex_follows_the_providers_key_rotation_by_itself(provider: OidcProvider) -> None:
    """Discovery and the key set fetched from the provider and cached; after a rotation the
    cache is refetched once for the new key, and the old key's token is refused."""
    keys = IssuerKeys(provider.issuer, SYSTEM_CLOCK, min_refresh_s=0)
    old = provider.client_token("svc-contoso", SECRET)
    assert keys.verify(old, audience=AUDIENCE, skew_s=60)["sub"] == "svc-contoso"
    provider.stop()
    provider.keys = [signing_key("second")]
    provider.start(provider_or_skip())  # the same issuer (port), a new signing key
    new = provider.client_token("svc-contoso", SECRET)
    assert keys.verify(new, audience=AUDIENCE, skew_s=60)["sub"] == "svc-contoso"
    with pytest.raises(OidcTokenError, match="signature"):
        keys.verify(old, audience=AUDIENCE, skew_s=60)
