"""The RBAC decision, table-driven, and its one promise as a property: a tenant-scoped principal
is never allowed anything on another tenant, and is told it does not exist (404), not forbidden."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.access import Action, Principal, Role, Verdict, decide, may_grant, visible_tenants
from gpuplex.core.access.policy import FLEET_ACTIONS

OPS = Principal("ops", Role.PLATFORM_ADMIN)
ADMIN = Principal("acme-admin", Role.TENANT_ADMIN, "acme")
VIEWER = Principal("acme-viewer", Role.TENANT_VIEWER, "acme")

A, F, N = Verdict.ALLOW, Verdict.FORBIDDEN, Verdict.NOT_FOUND

#: action -> verdicts for (tenant admin on own tenant, viewer on own tenant).
OWN_TENANT = {
    Action.TENANT_READ: (A, A),
    Action.KEY_READ: (A, A),
    Action.KEY_WRITE: (A, F),
    Action.TOKEN_READ: (A, F),
    Action.TOKEN_WRITE: (A, F),
    Action.USAGE_READ: (A, A),
    Action.STATEMENT_READ: (A, A),
    Action.BUDGET_READ: (A, A),
    Action.BUDGET_WRITE: (A, F),
    Action.AUDIT_READ: (A, F),
    Action.NODE_READ: (A, A),
    Action.EVENT_READ: (A, A),
    Action.FLEET_READ: (F, F),
    Action.SPEC_WRITE: (F, F),
    Action.METER_WRITE: (F, F),
}


def test_the_table_covers_every_action() -> None:
    assert set(OWN_TENANT) == set(Action)


@pytest.mark.parametrize("action", list(Action))
def test_decisions_on_the_own_tenant(action: Action) -> None:
    admin, viewer = OWN_TENANT[action]
    assert decide(ADMIN, action, "acme") is admin
    assert decide(VIEWER, action, "acme") is viewer
    assert decide(OPS, action, "acme") is A
    assert decide(OPS, action) is A


@pytest.mark.parametrize("action", list(Action))
def test_fleet_wide_questions_are_answered_like_the_own_tenant_or_forbidden(
    action: Action,
) -> None:
    expected = (F, F) if action in FLEET_ACTIONS else OWN_TENANT[action]
    assert (decide(ADMIN, action), decide(VIEWER, action)) == expected


@pytest.mark.parametrize("action", list(Action))
def test_another_tenant_is_not_found_for_tenant_roles(action: Action) -> None:
    assert decide(ADMIN, action, "globex") is N
    assert decide(VIEWER, action, "globex") is N
    assert decide(ADMIN, action, "acme ") is N  # no near matches
    assert decide(ADMIN, action, "ACME") is N


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


@given(principal=tenant_principals, action=st.sampled_from(list(Action)), other=tenant_names)
def test_a_tenant_principal_is_never_allowed_anything_on_another_tenant(
    principal: Principal, action: Action, other: str
) -> None:
    verdict = decide(principal, action, other)
    if other == principal.tenant:
        assert verdict in (A, F)
    else:
        assert verdict is N
        assert may_grant(principal, Role.TENANT_VIEWER, other) is not A
        assert may_grant(principal, Role.TENANT_ADMIN, other) is not A


@given(principal=tenant_principals, action=st.sampled_from(list(Action)))
def test_a_tenant_principal_never_holds_a_fleet_power(principal: Principal, action: Action) -> None:
    if action in FLEET_ACTIONS:
        assert decide(principal, action) is F
        assert decide(principal, action, principal.tenant) is F
    assert may_grant(principal, Role.PLATFORM_ADMIN, None) is F


@given(principal=tenant_principals, names=st.lists(tenant_names, max_size=8))
def test_a_tenant_principal_lists_only_its_own_tenant(
    principal: Principal, names: list[str]
) -> None:
    shown = visible_tenants(principal, names)
    assert set(shown) <= {principal.tenant}
    assert shown == [n for n in names if n == principal.tenant]
