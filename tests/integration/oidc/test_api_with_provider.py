"""The control plane's API taking the identity provider's tokens beside its own, against the real
oidc-provider: a service account in `gpu-alphaco-viewers` sees alphaco only, one in
`gpu-alphaco-admins` creates an API key (the audit entry names its subject at its issuer), one in
`gpu-platform-admins` sees every tenant; groups giving roles on two tenants, or none, are refused
(403); a token for another audience, a forged one and one to a control plane without `auth.oidc`
are 401 `unauthenticated`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from joserfc import jwt

from gpuplex.store.db import open_store
from tests.integration.server.conftest import SPEC_YAML, TENANT_A, Api, error_of, make_api
from tests.oidc.provider import AUDIENCE, OidcProvider, provider_or_skip, signing_key

SECRET = "service-account-secret-0123456789abcdef"  # noqa: S105 - test clients' secret
GROUPS = {
    "svc-platform": ["gpu-platform-admins"],
    "svc-a-admin": ["gpu-alphaco-admins", "unrelated-group"],
    "svc-a-viewer": ["gpu-alphaco-viewers"],
    "svc-two": ["gpu-alphaco-viewers", "gpu-bravoco-viewers"],
    "svc-mixed": ["gpu-alphaco-admins", "gpu-bravoco-viewers"],
    "svc-none": ["coffee-club"],
}


def client(client_id: str) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_secret": SECRET,
        "grant_types": ["client_credentials"],
        "redirect_uris": [],
        "response_types": [],
    }


def with_auth(issuer: str, audience: str = AUDIENCE) -> str:
    return SPEC_YAML + auth_section(issuer, audience)


def auth_section(issuer: str, audience: str = AUDIENCE) -> str:
    """`auth.oidc` for the test provider, with the suite's group rules, to add to a spec."""
    return f"""\
auth:
  oidc:
    issuer: {issuer}
    client_id: gpuplex
    audience: "{audience}"
    roles:
      - {{group: gpu-platform-admins, role: platform-admin}}
      - {{group: "gpu-{{tenant}}-admins", role: tenant-admin}}
      - {{group: "gpu-{{tenant}}-viewers", role: tenant-viewer}}
"""


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    running = OidcProvider(tmp_path, [signing_key("k1")], [client(c) for c in GROUPS], dict(GROUPS))
    running.start(provider_or_skip())
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def api(provider: OidcProvider, tmp_path: Path) -> Iterator[Api]:
    engine = open_store(f"sqlite:///{tmp_path / 'gpuplex.db'}")
    made = make_api(engine, tmp_path, apply_spec=False)
    with made.client:
        made.apply(with_auth(provider.issuer))
        for client_id in GROUPS:
            made.tokens[client_id] = provider.client_token(client_id, SECRET)
        yield made
    engine.dispose()


def tenants_seen(api: Api, caller: str) -> list[str]:
    reply = api.get("/tenants", caller)
    assert reply.status_code == 200, reply.text
    return sorted(t["name"] for t in reply.json()["items"])


def test_a_viewers_token_sees_its_tenant_only(api: Api) -> None:
    assert tenants_seen(api, "svc-a-viewer") == [TENANT_A]
    assert api.get(f"/tenants/{TENANT_A}", "svc-a-viewer").status_code == 200
    assert api.get("/tenants/bravoco", "svc-a-viewer").status_code == 404
    refused = api.post(f"/tenants/{TENANT_A}/keys", "svc-a-viewer", json={"name": "ci"})
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "forbidden"


def test_a_platform_admins_token_sees_every_tenant(api: Api) -> None:
    assert tenants_seen(api, "svc-platform") == tenants_seen(api, "admin")


def test_an_admins_change_is_audited_with_its_subject_at_its_issuer(
    api: Api, provider: OidcProvider
) -> None:
    made = api.post(f"/tenants/{TENANT_A}/keys", "svc-a-admin", json={"name": "ci"})
    assert made.status_code == 201, made.text
    (entry,) = api.ctx.audit.entries("key.create")
    assert entry.actor == f"svc-a-admin (oidc svc-a-admin at {provider.issuer})"


@pytest.mark.parametrize(
    ("caller", "says"), [("svc-two", "several tenants"), ("svc-none", "none of your groups")]
)
def test_groups_giving_roles_on_two_tenants_need_a_choice_and_none_are_refused(
    api: Api, caller: str, says: str
) -> None:
    refused = api.get("/tenants", caller)
    assert refused.status_code == 403
    assert says in error_of(refused)["message"]


def test_a_person_with_roles_on_two_tenants_acts_on_one_per_request(api: Api) -> None:
    def seen(tenant: str) -> list[str]:
        reply = api.get("/tenants", "svc-mixed", headers={"x-gpuplex-tenant": tenant})
        assert reply.status_code == 200, reply.text
        return [t["name"] for t in reply.json()["items"]]

    assert seen(TENANT_A) == [TENANT_A]
    assert seen("bravoco") == ["bravoco"]
    me = api.get("/whoami", "svc-mixed", headers={"x-gpuplex-tenant": "bravoco"}).json()
    assert (me["role"], me["tenant"]) == ("tenant-viewer", "bravoco")
    # the path names the tenant: no header needed; the role is the one held on that tenant
    assert api.get("/tenants/bravoco", "svc-mixed").status_code == 200
    made = api.post(f"/tenants/{TENANT_A}/keys", "svc-mixed", json={"name": "ci"})
    assert made.status_code == 201, made.text
    refused = api.post("/tenants/bravoco/keys", "svc-mixed", json={"name": "ci"})
    assert refused.status_code == 403
    # a tenant the groups give nothing on, by header or by path, is refused
    other = api.get("/tenants", "svc-mixed", headers={"x-gpuplex-tenant": "charlieco"})
    assert other.status_code == 403
    assert "no role on tenant 'charlieco'" in error_of(other)["message"]
    assert api.get("/tenants/charlieco", "svc-mixed").status_code == 403
    # one header cannot reach past what the path says: the path's tenant is checked by RBAC
    crossed = api.get("/tenants/bravoco/keys", "svc-mixed", headers={"x-gpuplex-tenant": TENANT_A})
    assert crossed.status_code == 404


def test_foreign_and_forged_tokens_are_401(api: Api, provider: OidcProvider) -> None:
    forged = jwt.encode(
        {"alg": "RS256", "kid": "k1"},
        {"iss": provider.issuer, "aud": AUDIENCE, "sub": "mallory", "exp": 4_000_000_000},
        signing_key("k1"),  # same kid, not the provider's key
    )
    api.tokens["forged"] = forged
    api.tokens["garbage"] = "a.b.c"
    for caller in ("forged", "garbage"):
        reply = api.get("/tenants", caller)
        assert reply.status_code == 401, reply.text
        assert error_of(reply)["code"] == "unauthenticated"
    api.apply(with_auth(provider.issuer, audience="urn:someone-else"))
    reply = api.get("/tenants", "svc-platform")
    assert reply.status_code == 401
    assert "claims" in error_of(reply)["message"]


def test_without_auth_oidc_the_providers_tokens_are_401(api: Api) -> None:
    api.apply(SPEC_YAML)
    reply = api.get("/tenants", "svc-platform")
    assert reply.status_code == 401
    assert "auth.oidc" in error_of(reply)["message"]
    assert api.get("/tenants", "admin").status_code == 200  # gpuplex's own tokens still work
