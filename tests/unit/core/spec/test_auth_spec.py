"""`auth.oidc` in gpuplex.yaml: a valid section, each problem at its field, and a person's groups
becoming roles by its rules (fixed groups, `{tenant}` patterns, groups naming no tenant)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.access import Role
from gpuplex.core.access.oidc_groups import Grant, GroupRule, grants_of
from gpuplex.core.spec import GpuplexSpec, validate_spec

TENANTS = [{"name": "contoso"}, {"name": "fabrikam"}]
ISSUER = "https://login.example.com/realms/acme"


FLEET = {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 1}]}]}


def spec(**oidc: Any) -> dict[str, Any]:
    return {
        "fleet": FLEET,
        "tenants": TENANTS,
        "auth": {"oidc": {"issuer": ISSUER, "client_id": "gpuplex", **oidc}},
    }


def test_a_valid_section() -> None:
    parsed = validate_spec(
        spec(
            client_secret_env="GPUPLEX_OIDC_CLIENT_SECRET",  # noqa: S106 - a variable's name
            roles=[
                {"group": "gpu-platform-admins", "role": "platform-admin"},
                {"group": "gpu-{tenant}-admins", "role": "tenant-admin"},
                {"group": "contoso-readers", "role": "tenant-viewer", "tenant": "contoso"},
            ],
        )
    )
    assert isinstance(parsed, GpuplexSpec), parsed
    oidc = parsed.auth.oidc
    assert oidc is not None
    assert oidc.expected_audience == "gpuplex"
    assert oidc.scopes == ["openid", "profile", "email"]
    assert validate_spec({"fleet": FLEET, "tenants": TENANTS}).auth.oidc is None  # type: ignore[union-attr]
    assert oidc.gateway is None
    assert oidc.gateway_audience is None  # the gateway takes no provider tokens


@pytest.mark.parametrize(
    ("gateway", "audience"),
    [
        ({"tenant_claim": "gpuplex_tenant"}, "urn:gpuplex:api"),  # auth.oidc's audience
        (
            {"tenant_claim": "gpuplex_tenant", "audience": "urn:gpuplex:gateway"},
            "urn:gpuplex:gateway",
        ),
    ],
)
def test_the_gateway_section_and_the_audience_its_tokens_carry(
    gateway: dict[str, Any], audience: str
) -> None:
    parsed = validate_spec(spec(audience="urn:gpuplex:api", gateway=gateway))
    assert isinstance(parsed, GpuplexSpec), parsed
    oidc = parsed.auth.oidc
    assert oidc is not None
    assert oidc.gateway is not None
    assert oidc.gateway.tenant_claim == "gpuplex_tenant"
    assert oidc.gateway_audience == audience


@pytest.mark.parametrize(
    ("oidc", "field", "says"),
    [
        ({"issuer": "http://login.example.com"}, ("auth", "oidc", "issuer"), "https"),
        ({"client_secret": "s3cret"}, ("auth", "oidc", "client_secret"), ""),
        (
            {"client_secret_env": "X", "client_secret_file": "/run/secret"},
            ("auth", "oidc", "client_secret_env"),
            "one way",
        ),
        ({"scopes": ["profile"]}, ("auth", "oidc", "scopes"), "openid"),
        (
            {"roles": [{"group": "g", "role": "tenant-admin", "tenant": "contosso"}]},
            ("auth", "oidc", "roles", 0, "tenant"),
            'did you mean "contoso"',
        ),
        (
            {"roles": [{"group": "g", "role": "tenant-viewer"}]},
            ("auth", "oidc", "roles", 0, "tenant"),
            "names its tenant",
        ),
        (
            {"roles": [{"group": "{tenant}-{tenant}", "role": "tenant-viewer"}]},
            ("auth", "oidc", "roles", 0, "group"),
            "once",
        ),
        (
            {"roles": [{"group": "gpu-{tenant}", "role": "tenant-admin", "tenant": "contoso"}]},
            ("auth", "oidc", "roles", 0, "tenant"),
            "one way",
        ),
        (
            {"roles": [{"group": "admins", "role": "platform-admin", "tenant": "contoso"}]},
            ("auth", "oidc", "roles", 0, "role"),
            "name no tenant",
        ),
        ({"roles": [{"group": "g", "role": "root"}]}, ("auth", "oidc", "roles", 0, "role"), ""),
        ({"gateway": {}}, ("auth", "oidc", "gateway", "tenant_claim"), ""),
        (
            {"gateway": {"tenant_claim": ""}},
            ("auth", "oidc", "gateway", "tenant_claim"),
            "at least 1",
        ),
        (
            {"gateway": {"tenant_claim": "aud"}},
            ("auth", "oidc", "gateway", "tenant_claim"),
            "not its account",
        ),
        (
            {"gateway": {"tenant_claim": "t", "audience": ""}},
            ("auth", "oidc", "gateway", "audience"),
            "",
        ),
        (
            {"gateway": {"tenant_claim": "t", "tenant_map": {}}},
            ("auth", "oidc", "gateway", "tenant_map"),
            "",
        ),
    ],
)
def test_each_problem_is_at_its_field(
    oidc: dict[str, Any], field: tuple[str | int, ...], says: str
) -> None:
    problems = validate_spec(spec(**oidc))
    assert isinstance(problems, list), problems
    assert [p.path for p in problems] == [field], problems
    assert says in problems[0].message


def test_loopback_issuers_may_be_plain_http() -> None:
    for issuer in ("http://127.0.0.1:4000", "http://localhost/oidc", "http://[::1]:9000"):
        assert isinstance(validate_spec(spec(issuer=issuer)), GpuplexSpec), issuer


RULES = [
    GroupRule("gpu-platform-admins", Role.PLATFORM_ADMIN),
    GroupRule("gpu-{tenant}-admins", Role.TENANT_ADMIN),
    GroupRule("gpu-{tenant}-viewers", Role.TENANT_VIEWER),
    GroupRule("contoso-readers", Role.TENANT_VIEWER, "contoso"),
]


@pytest.mark.parametrize(
    ("groups", "grants"),
    [
        (["gpu-platform-admins"], [Grant(Role.PLATFORM_ADMIN, None)]),
        (["gpu-contoso-viewers"], [Grant(Role.TENANT_VIEWER, "contoso")]),
        (
            ["gpu-contoso-admins", "contoso-readers", "gpu-fabrikam-viewers"],
            [
                Grant(Role.TENANT_ADMIN, "contoso"),
                Grant(Role.TENANT_VIEWER, "contoso"),
                Grant(Role.TENANT_VIEWER, "fabrikam"),
            ],
        ),
        (["gpu-unknownco-admins"], []),  # no such tenant: nothing
        (["gpu-contoso-admins-extra"], []),  # the pattern fills the whole group, not a part
        (["xgpu-contoso-admins"], []),
        (["gpu--admins"], []),
        ([], []),
    ],
)
def test_groups_become_roles_by_the_rules(groups: list[str], grants: list[Grant]) -> None:
    assert grants_of(groups, RULES, {"contoso", "fabrikam"}) == grants
