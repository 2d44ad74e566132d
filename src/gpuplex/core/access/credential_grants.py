"""Credentials a person made hold only while the person could make them now. Pure.

A control-plane token or an API key made by a person signed in with the identity provider (or by a
token in that person's chain) records the person and the grant they acted under. Whenever the
person's grants may have changed (a spec is applied; their groups are seen anew at a sign-in or on
a bearer token), each such credential is judged again: it stays active while the person's groups,
under the rules applied now, give a role that could make it (`could_make`, by the RBAC table
itself); otherwise it is suspended, and it resumes once they do again. Revoked and expired
credentials are not judged: revocation is final.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from gpuplex.core.access.oidc_groups import Grant, GroupRule, grants_of
from gpuplex.core.access.policy import Permission, Principal, Role, Verdict, decide, may_grant

CredentialKind = Literal["token", "key"]

SUSPEND_REASON = (
    "the person who made it no longer holds a role that could make it "
    "(their groups under auth.oidc.roles)"
)
RESUME_REASON = "the person who made it holds a role that could make it again"


@dataclass(frozen=True, slots=True)
class GrantRules:
    """The applied spec's `auth.oidc`, as far as grants go: its issuer, its group rules and the
    spec's tenants (which `{tenant}` rules may name)."""

    issuer: str
    rules: tuple[GroupRule, ...]
    tenants: frozenset[str]


def held_grants(issuer: str, groups: Iterable[str], rules: GrantRules | None) -> list[Grant]:
    """What a person of `issuer` in `groups` holds under `rules`: nothing when no rules apply or
    they name another issuer."""
    if rules is None or rules.issuer != issuer:
        return []
    return grants_of(groups, rules.rules, rules.tenants)


def groups_giving(groups: Iterable[str], grant: Grant, rules: GrantRules | None) -> list[str]:
    """Which of `groups` give `grant` by themselves under `rules` (sorted): the groups a credential
    records as the ones its maker's role came from."""
    if rules is None:
        return []
    return sorted(
        {g for g in groups if grant in grants_of([g], rules.rules, rules.tenants)},
    )


@dataclass(frozen=True, slots=True)
class MadeCredential:
    """A live (neither revoked nor expired) credential in a person's chain, as judging needs it:
    a token's role and tenant (a platform-admin token has none), or a key's tenant."""

    kind: CredentialKind
    prefix: str
    tenant: str | None
    suspended: bool
    role: Role | None = None  # tokens only


def could_make(held: Collection[Grant], credential: MadeCredential) -> bool:
    """Whether a person holding `held` could make `credential` now: a key needs `key.write` on its
    tenant, a token what `may_grant` asks (nobody grants more than they hold)."""
    for grant in held:
        acting = Principal(name="", role=grant.role, tenant=grant.tenant)
        if credential.kind == "key":
            allowed = decide(acting, Permission.KEY_WRITE, credential.tenant)
        else:
            role = credential.role or Role.PLATFORM_ADMIN
            allowed = may_grant(acting, role, credential.tenant)
        if allowed is Verdict.ALLOW:
            return True
    return False


class GrantTransition(StrEnum):
    SUSPEND = "suspend"
    RESUME = "resume"


@dataclass(frozen=True, slots=True)
class GrantChange:
    credential: MadeCredential
    transition: GrantTransition

    @property
    def reason(self) -> str:
        return SUSPEND_REASON if self.transition is GrantTransition.SUSPEND else RESUME_REASON


def grant_changes(made: Sequence[MadeCredential], held: Collection[Grant]) -> list[GrantChange]:
    """The credentials of one person's chain that change state, given what the person holds now:
    an active one they could not make now is suspended, a suspended one they could make resumes;
    the rest stay as they are. In the order given."""
    changes = []
    for credential in made:
        allowed = could_make(held, credential)
        if allowed and credential.suspended:
            changes.append(GrantChange(credential, GrantTransition.RESUME))
        elif not allowed and not credential.suspended:
            changes.append(GrantChange(credential, GrantTransition.SUSPEND))
    return changes
