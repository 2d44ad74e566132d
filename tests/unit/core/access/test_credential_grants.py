"""The rule that credentials a person made hold only while the person could make them now:
table-driven over grants and credentials, the groups a grant came from, and as properties: judging
twice changes nothing the second time, and a change is always towards what the grants allow."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.access import Role
from gpuplex.core.access.credential_grants import (
    RESUME_REASON,
    SUSPEND_REASON,
    GrantChange,
    GrantRules,
    GrantTransition,
    MadeCredential,
    could_make,
    grant_changes,
    groups_giving,
    held_grants,
)
from gpuplex.core.access.oidc_groups import Grant, GroupRule

ISSUER = "https://login.example.com/realms/acme"
RULES = GrantRules(
    issuer=ISSUER,
    rules=(
        GroupRule("gpu-platform-admins", Role.PLATFORM_ADMIN),
        GroupRule("gpu-{tenant}-admins", Role.TENANT_ADMIN),
        GroupRule("gpu-{tenant}-viewers", Role.TENANT_VIEWER),
        GroupRule("finance", Role.TENANT_VIEWER, "acme"),
    ),
    tenants=frozenset({"acme", "globex"}),
)
PLATFORM = Grant(Role.PLATFORM_ADMIN, None)
ACME_ADMIN = Grant(Role.TENANT_ADMIN, "acme")
ACME_VIEWER = Grant(Role.TENANT_VIEWER, "acme")
GLOBEX_ADMIN = Grant(Role.TENANT_ADMIN, "globex")

ACME_KEY = MadeCredential("key", "k1", "acme", suspended=False)
ACME_ADMIN_TOKEN = MadeCredential("token", "t1", "acme", False, Role.TENANT_ADMIN)
ACME_VIEWER_TOKEN = MadeCredential("token", "t2", "acme", False, Role.TENANT_VIEWER)
PLATFORM_TOKEN = MadeCredential("token", "t3", None, False, Role.PLATFORM_ADMIN)


@pytest.mark.parametrize(
    ("held", "credential", "allowed"),
    [
        ([ACME_ADMIN], ACME_KEY, True),
        ([ACME_ADMIN], ACME_ADMIN_TOKEN, True),
        ([ACME_ADMIN], ACME_VIEWER_TOKEN, True),
        ([ACME_ADMIN], PLATFORM_TOKEN, False),  # nobody grants more than they hold
        ([PLATFORM], PLATFORM_TOKEN, True),
        ([PLATFORM], ACME_KEY, True),
        # lowered to viewer: a viewer could make none of them
        ([ACME_VIEWER], ACME_KEY, False),
        ([ACME_VIEWER], ACME_ADMIN_TOKEN, False),
        ([ACME_VIEWER], ACME_VIEWER_TOKEN, False),
        # admin of another tenant only
        ([GLOBEX_ADMIN], ACME_KEY, False),
        ([GLOBEX_ADMIN, ACME_ADMIN], ACME_KEY, True),
        ([], ACME_KEY, False),
        ([], PLATFORM_TOKEN, False),
    ],
)
def test_a_credential_holds_while_its_maker_could_make_it(
    held: list[Grant], credential: MadeCredential, allowed: bool
) -> None:
    assert could_make(held, credential) is allowed


def test_a_lost_grant_suspends_and_a_returned_one_resumes_only_what_changes() -> None:
    suspended_key = MadeCredential("key", "k2", "acme", suspended=True)
    made = [ACME_KEY, ACME_ADMIN_TOKEN, suspended_key]
    assert grant_changes(made, [ACME_VIEWER]) == [
        GrantChange(ACME_KEY, GrantTransition.SUSPEND),
        GrantChange(ACME_ADMIN_TOKEN, GrantTransition.SUSPEND),
    ]
    assert grant_changes(made, [ACME_ADMIN]) == [GrantChange(suspended_key, GrantTransition.RESUME)]
    assert grant_changes(made, [PLATFORM]) == [GrantChange(suspended_key, GrantTransition.RESUME)]
    (suspension,) = grant_changes([ACME_KEY], [])
    assert suspension.reason == SUSPEND_REASON
    (resumption,) = grant_changes([suspended_key], [ACME_ADMIN])
    assert resumption.reason == RESUME_REASON


@pytest.mark.parametrize(
    ("issuer", "groups", "rules", "held"),
    [
        (ISSUER, ["gpu-acme-admins", "coffee"], RULES, [ACME_ADMIN]),
        (ISSUER, ["gpu-acme-viewers", "finance"], RULES, [ACME_VIEWER]),
        (ISSUER, ["gpu-platform-admins"], RULES, [PLATFORM]),
        (ISSUER, ["gpu-initech-admins"], RULES, []),  # no such tenant
        ("https://other.example.com", ["gpu-acme-admins"], RULES, []),  # another issuer's person
        (ISSUER, ["gpu-acme-admins"], None, []),  # no auth.oidc applied
        (
            ISSUER,
            ["gpu-acme-admins"],
            GrantRules(ISSUER, RULES.rules[2:], RULES.tenants),  # the admins rule removed
            [],
        ),
    ],
)
def test_what_a_person_holds_comes_from_the_rules_of_their_issuer(
    issuer: str, groups: list[str], rules: GrantRules | None, held: list[Grant]
) -> None:
    assert held_grants(issuer, groups, rules) == held


def test_the_groups_a_grant_came_from_are_only_those_giving_it() -> None:
    groups = ["gpu-acme-admins", "gpu-globex-admins", "finance", "coffee"]
    assert groups_giving(groups, ACME_ADMIN, RULES) == ["gpu-acme-admins"]
    assert groups_giving(groups, ACME_VIEWER, RULES) == ["finance"]
    assert groups_giving(groups, PLATFORM, RULES) == []
    assert groups_giving(groups, ACME_ADMIN, None) == []


grants = st.lists(
    st.sampled_from([PLATFORM, ACME_ADMIN, ACME_VIEWER, GLOBEX_ADMIN]), max_size=3, unique=True
)
credential = st.builds(
    MadeCredential,
    kind=st.sampled_from(["key", "token"]),
    prefix=st.just(""),
    tenant=st.sampled_from(["acme", "globex"]),
    suspended=st.booleans(),
    role=st.sampled_from([Role.TENANT_ADMIN, Role.TENANT_VIEWER]),
)


def numbered(made: list[MadeCredential]) -> list[MadeCredential]:
    return [replace(c, prefix=f"{n:08x}") for n, c in enumerate(made)]


def changed(made: list[MadeCredential], changes: list[GrantChange]) -> list[MadeCredential]:
    to = {c.credential.prefix: c.transition is GrantTransition.SUSPEND for c in changes}
    return [replace(c, suspended=to.get(c.prefix, c.suspended)) for c in made]


@given(st.lists(credential, max_size=6).map(numbered), grants)
def test_after_the_changes_each_credential_is_suspended_exactly_when_its_maker_could_not_make_it(
    made: list[MadeCredential], held: list[Grant]
) -> None:
    after = changed(made, grant_changes(made, held))
    assert [c.suspended for c in after] == [not could_make(held, c) for c in after]
    assert grant_changes(after, held) == []  # judging again changes nothing
