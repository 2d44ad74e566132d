"""The RBAC decision, table-driven, and its one promise as a property: a tenant-scoped principal
is never allowed anything on another tenant, and is told it does not exist (404), not forbidden."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.access import (
    Permission,
    Principal,
    Role,
    Verdict,
    decide,
    may_grant,
    visible_tenants,
)
from gpuplex.core.access.policy import FLEET_PERMISSIONS

OPS = Principal("ops", Role.PLATFORM_ADMIN)
ADMIN = Principal("acme-admin", Role.TENANT_ADMIN, "acme")
VIEWER = Principal("acme-viewer", Role.TENANT_VIEWER, "acme")

A, F, N = Verdict.ALLOW, Verdict.FORBIDDEN, Verdict.NOT_FOUND

#: permission -> verdicts for (tenant admin on own tenant, viewer on own tenant).
OWN_TENANT = {
    Permission.TENANT_READ: (A, A),
    Permission.KEY_READ: (A, A),
    Permission.KEY_WRITE: (A, F),
    Permission.TOKEN_READ: (A, F),
    Permission.TOKEN_WRITE: (A, F),
    Permission.USAGE_READ: (A, A),
    Permission.STATEMENT_READ: (A, A),
    Permission.BUDGET_READ: (A, A),
    Permission.BUDGET_WRITE: (A, F),
    Permission.AUDIT_READ: (A, F),
    Permission.NODE_READ: (A, A),
    Permission.EVENT_READ: (A, A),
    Permission.JOB_READ: (A, A),
    Permission.JOB_WRITE: (A, F),
    Permission.FLEET_READ: (F, F),
    Permission.SPEC_WRITE: (F, F),
    Permission.METER_WRITE: (F, F),
}


def test_the_table_covers_every_permission() -> None:
    assert set(OWN_TENANT) == set(Permission)


@pytest.mark.parametrize("permission", list(Permission))
def test_decisions_on_the_own_tenant(permission: Permission) -> None:
    admin, viewer = OWN_TENANT[permission]
    assert decide(ADMIN, permission, "acme") is admin
    assert decide(VIEWER, permission, "acme") is viewer
    assert decide(OPS, permission, "acme") is A
    assert decide(OPS, permission) is A


@pytest.mark.parametrize("permission", list(Permission))
def test_fleet_wide_questions_are_answered_like_the_own_tenant_or_forbidden(
    permission: Permission,
) -> None:
    expected = (F, F) if permission in FLEET_PERMISSIONS else OWN_TENANT[permission]
    assert (decide(ADMIN, permission), decide(VIEWER, permission)) == expected


@pytest.mark.parametrize("permission", list(Permission))
def test_another_tenant_is_not_found_for_tenant_roles(permission: Permission) -> None:
    assert decide(ADMIN, permission, "globex") is N
    assert decide(VIEWER, permission, "globex") is N
    assert decide(ADMIN, permission, "acme ") is N  # no near matches
    assert decide(ADMIN, permission, "ACME") is N


@pytest.mark.parametrize(
    ("granter", "role", "tenant", "verdict"),
    [
        (OPS, Role.PLATFORM_ADMIN, None, A),
        (OPS, Role.TENANT_VIEWER, "globex", A),
        (ADMIN, Role.TENANT_ADMIN, "acme", A),
        (ADMIN, Role.TENANT_VIEWER, "acme", A),
        (ADMIN, Role.PLATFORM_ADMIN, None, F),
        (ADMIN, Role.TENANT_ADMIN, None, F),
        (ADMIN, Role.TENANT_VIEWER, "globex", N),
        (VIEWER, Role.TENANT_VIEWER, "acme", F),
        (VIEWER, Role.PLATFORM_ADMIN, None, F),
        (VIEWER, Role.TENANT_VIEWER, "globex", N),
    ],
)
def test_nobody_grants_more_than_they_hold(
    granter: Principal, role: Role, tenant: str | None, verdict: Verdict
) -> None:
    assert may_grant(granter, role, tenant) is verdict


def test_visible_tenants() -> None:
    names = ["globex", "acme", "initech"]
    assert visible_tenants(OPS, names) == names
    assert visible_tenants(ADMIN, names) == ["acme"]
    assert visible_tenants(VIEWER, ["globex"]) == []


tenant_names = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12)
tenant_principals = st.builds(
    Principal,
    name=st.text(max_size=10),
    role=st.sampled_from([Role.TENANT_ADMIN, Role.TENANT_VIEWER]),
    tenant=tenant_names,
)


@given(
    principal=tenant_principals, permission=st.sampled_from(list(Permission)), other=tenant_names
)
def test_a_tenant_principal_is_never_allowed_anything_on_another_tenant(
    principal: Principal, permission: Permission, other: str
) -> None:
    verdict = decide(principal, permission, other)
    if other == principal.tenant:
        assert verdict in (A, F)
    else:
        assert verdict is N
        assert may_grant(principal, Role.TENANT_VIEWER, other) is not A
        assert may_grant(principal, Role.TENANT_ADMIN, other) is not A


@given(principal=tenant_principals, permission=st.sampled_from(list(Permission)))
def test_a_tenant_principal_never_holds_a_fleet_power(
    principal: Principal, permission: Permission
) -> None:
    if permission in FLEET_PERMISSIONS:
        assert decide(principal, permission) is F
        assert decide(principal, permission, principal.tenant) is F
    assert may_grant(principal, Role.PLATFORM_ADMIN, None) is F


@given(principal=tenant_principals, names=st.lists(tenant_names, max_size=8))
def test_a_tenant_principal_lists_only_its_own_tenant(
    principal: Principal, names: list[str]
) -> None:
    shown = visible_tenants(principal, names)
    assert set(shown) <= {principal.tenant}
    assert shown == [n for n in names if n == principal.tenant]
