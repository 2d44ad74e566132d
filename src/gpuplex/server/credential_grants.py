"""The control plane's side of "credentials follow the person who made them"
(core.access.credential_grants, store/credential_grants.py): the applied spec's rules as
`GrantRules`, a person's groups noted as they are seen, and who makes a credential a route creates.
"""

from __future__ import annotations

from gpuplex.clock import Clock
from gpuplex.core.access import Principal, Role
from gpuplex.core.access.credential_grants import GrantRules, groups_giving
from gpuplex.core.access.oidc_groups import Grant, GroupRule
from gpuplex.core.spec import GpuplexSpec
from gpuplex.revision import AppliedRevisions
from gpuplex.store.credential_grants import OidcPeople
from gpuplex.store.credentials import CredentialMaker

#: What caused a review when a person's groups were seen on a request (a bearer token, a session).
SEEN_ON_A_REQUEST = "their groups as last seen changed"
#: ... and at a dashboard sign-in.
SEEN_AT_SIGN_IN = "their groups at a dashboard sign-in changed"


def rules_of_spec(spec: GpuplexSpec) -> GrantRules | None:
    """The spec's `auth.oidc` rules with its tenants; None without `auth.oidc`."""
    oidc = spec.auth.oidc
    if oidc is None:
        return None
    return GrantRules(
        issuer=oidc.issuer,
        rules=tuple(GroupRule(r.group, r.role, r.tenant) for r in oidc.roles),
        tenants=frozenset(t.name for t in spec.tenants),
    )


def rules_now(current: AppliedRevisions) -> GrantRules | None:
    """The rules of the revision applied now (read from the store when called)."""
    applied = current.get()
    return rules_of_spec(applied.spec) if applied is not None else None


def note_groups_seen(
    people: OidcPeople,
    current: AppliedRevisions,
    clock: Clock,
    groups: list[str],
    subject: str,
    name: str,
    issuer: str,
    cause: str = SEEN_ON_A_REQUEST,
) -> None:
    """A person was seen in `groups`: kept, and their credentials judged again when the groups
    changed (one read by primary key when they did not)."""
    people.seen(
        issuer=issuer,
        subject=subject,
        name=name,
        groups=groups,
        rules=lambda: rules_now(current),
        now=clock.utc_now(),
        cause=cause,
    )


def credential_maker(
    people: OidcPeople, current: AppliedRevisions, principal: Principal
) -> CredentialMaker | None:
    """Who makes a credential `principal` creates: a person, with the grant they act under and the
    groups (as last seen) that give it; or a gpuplex token, whose chain the store follows; None
    for neither."""
    if principal.issuer is not None and principal.subject is not None:
        tenant = None if principal.role is Role.PLATFORM_ADMIN else principal.tenant
        person = people.get(principal.issuer, principal.subject)
        groups = person.groups if person is not None else ()
        giving = groups_giving(groups, Grant(principal.role, tenant), rules_now(current))
        return CredentialMaker(
            issuer=principal.issuer,
            subject=principal.subject,
            grant_role=principal.role.value,
            grant_tenant=tenant,
            grant_groups=tuple(giving),
        )
    if principal.token_prefix is not None:
        return CredentialMaker(token_prefix=principal.token_prefix)
    return None
