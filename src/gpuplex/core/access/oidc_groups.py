"""A person's groups (from the identity provider's groups claim) as gpuplex roles, by the spec's
`auth.oidc.roles`. Pure.

A rule with a fixed group gives its role on its tenant (or the platform); a rule whose group holds
`{tenant}` gives its role on each tenant of the spec whose name fills it exactly
(`gpu-{tenant}-admins` and the group `gpu-contoso-admins` give contoso). A group naming no tenant
of the spec gives nothing. Every grant a person's groups give is returned; none means no access.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from gpuplex.core.access.policy import Role

TENANT_PLACEHOLDER = "{tenant}"


@dataclass(frozen=True, slots=True, order=True)
class GroupRule:
    group: str
    role: Role
    tenant: str | None = None


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """A role, on a tenant (None: the platform)."""

    role: Role
    tenant: str | None


def grants_of(
    groups: Iterable[str], rules: Sequence[GroupRule], tenants: Collection[str]
) -> list[Grant]:
    """Every grant `groups` give by `rules`, on the spec's `tenants`; sorted, each once."""
    names = set(groups)
    found: set[Grant] = set()
    for rule in rules:
        if TENANT_PLACEHOLDER not in rule.group:
            if rule.group in names:
                tenant = None if rule.role is Role.PLATFORM_ADMIN else rule.tenant
                found.add(Grant(rule.role, tenant))
            continue
        pattern = _pattern(rule.group)
        for group in names:
            matched = pattern.fullmatch(group)
            if matched is not None and matched["tenant"] in tenants:
                found.add(Grant(rule.role, matched["tenant"]))
    return sorted(found, key=lambda g: (g.role.value, g.tenant or ""))


def _pattern(group: str) -> re.Pattern[str]:
    before, _, after = group.partition(TENANT_PLACEHOLDER)
    return re.compile(
        re.escape(before) + r"(?P<tenant>[a-z0-9]([-a-z0-9]*[a-z0-9])?)" + re.escape(after)
    )
