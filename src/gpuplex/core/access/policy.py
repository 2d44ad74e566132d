"""The control plane's RBAC as one table and one function.

Three roles: a platform admin runs the fleet and sees everything; a tenant admin manages their own
tenant (keys, tokens, budget, jobs) and reads its usage, bill and audit trail; a tenant viewer only reads
their own tenant. A tenant-scoped principal asking about another tenant's objects is told they do
not exist (404), never that they are forbidden (403): the answer must not reveal other tenants.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    PLATFORM_ADMIN = "platform-admin"
    TENANT_ADMIN = "tenant-admin"
    TENANT_VIEWER = "tenant-viewer"


class Permission(StrEnum):
    TENANT_READ = "tenant.read"  # tenants, workloads, quota
    KEY_READ = "key.read"
    KEY_WRITE = "key.write"
    TOKEN_READ = "token.read"  # noqa: S105 (a permission's name, not a secret)
    TOKEN_WRITE = "token.write"  # noqa: S105
    USAGE_READ = "usage.read"
    STATEMENT_READ = "statement.read"
    BUDGET_READ = "budget.read"
    BUDGET_WRITE = "budget.write"
    AUDIT_READ = "audit.read"
    NODE_READ = "node.read"  # the GPU map; tenant roles see only their own occupants
    EVENT_READ = "event.read"
    FLEET_READ = "fleet.read"  # the whole spec, every tenant's usage, the fleet statement
    SPEC_WRITE = "spec.write"  # preview and apply a spec
    METER_WRITE = "meter.write"  # run a metering roll-up
    JOB_READ = "job.read"  # jobs, their events, why they wait, their logs
    JOB_WRITE = "job.write"  # submit and cancel jobs


class Verdict(StrEnum):
    ALLOW = "allow"
    FORBIDDEN = "forbidden"  # 403: the principal may see the object but not do this
    NOT_FOUND = "not_found"  # 404: another tenant's object, whose existence is not revealed


def oidc_actor(name: str, subject: str, issuer: str) -> str:
    """How the audit log names a person signed in with the identity provider."""
    return f"{name} (oidc {subject} at {issuer})"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: a token's name, role and (for tenant roles) tenant; or a person (or service
    account) signed in with the identity provider: its issuer and subject, and the name or email
    its token gave."""

    name: str
    role: Role
    tenant: str | None = None  # None only for platform admins
    token_prefix: str | None = None  # the token's public prefix: names it beyond doubt
    issuer: str | None = None  # set for an identity provider's token
    subject: str | None = None

    @property
    def is_platform(self) -> bool:
        return self.role is Role.PLATFORM_ADMIN

    @property
    def actor(self) -> str:
        """Who the audit log says did it: the token's name, which its creator chose freely, and
        its prefix, which nobody chooses, so no one can pass for another; for the identity
        provider's tokens, the person's name or email and its subject at its issuer."""
        if self.issuer is not None:
            return oidc_actor(self.name, self.subject or "", self.issuer)
        if self.token_prefix is None:
            return self.name
        return f"{self.name} (token {self.token_prefix})"


#: What each tenant-scoped role may do on its own tenant. Platform admins may do everything.
TENANT_ROLE_PERMISSIONS: dict[Role, frozenset[Permission]] = {
    Role.TENANT_ADMIN: frozenset(
        {
            Permission.TENANT_READ,
            Permission.KEY_READ,
            Permission.KEY_WRITE,
            Permission.TOKEN_READ,
            Permission.TOKEN_WRITE,
            Permission.USAGE_READ,
            Permission.STATEMENT_READ,
            Permission.BUDGET_READ,
            Permission.BUDGET_WRITE,
            Permission.AUDIT_READ,
            Permission.NODE_READ,
            Permission.EVENT_READ,
            Permission.JOB_READ,
            Permission.JOB_WRITE,
        }
    ),
    Role.TENANT_VIEWER: frozenset(
        {
            Permission.TENANT_READ,
            Permission.KEY_READ,
            Permission.USAGE_READ,
            Permission.STATEMENT_READ,
            Permission.BUDGET_READ,
            Permission.NODE_READ,
            Permission.EVENT_READ,
            Permission.JOB_READ,
        }
    ),
}

#: Permissions about the fleet as a whole, not about one tenant.
FLEET_PERMISSIONS = frozenset(
    {Permission.FLEET_READ, Permission.SPEC_WRITE, Permission.METER_WRITE}
)


def decide(principal: Principal, permission: Permission, tenant: str | None = None) -> Verdict:
    """Does `principal` hold `permission` on `tenant`'s objects (or, with tenant None, fleet-wide)?"""
    if principal.is_platform:
        return Verdict.ALLOW
    if tenant is not None and tenant != principal.tenant:
        return Verdict.NOT_FOUND
    if permission in FLEET_PERMISSIONS:
        return Verdict.FORBIDDEN
    allowed = TENANT_ROLE_PERMISSIONS.get(principal.role, frozenset())
    return Verdict.ALLOW if permission in allowed else Verdict.FORBIDDEN


def visible_tenants(principal: Principal, tenants: list[str]) -> list[str]:
    """The tenants a listing shows this principal: all for a platform admin, else their own."""
    if principal.is_platform:
        return list(tenants)
    return [name for name in tenants if name == principal.tenant]


def may_grant(principal: Principal, role: Role, tenant: str | None) -> Verdict:
    """May `principal` create a token with `role` for `tenant`? Nobody grants more than they hold:
    a tenant admin makes tenant-admin or viewer tokens for their own tenant only."""
    if principal.is_platform:
        return Verdict.ALLOW
    if role is Role.PLATFORM_ADMIN or tenant is None:
        return Verdict.FORBIDDEN
    return decide(principal, Permission.TOKEN_WRITE, tenant)
