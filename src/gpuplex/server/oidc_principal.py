"""A bearer token from the company's identity provider as a Principal: checked against the applied
spec's `auth.oidc` (signature with the issuer's keys, issuer, audience, expiry), then the person's
groups become roles by its rules (core.access.oidc_groups).

This version maps a person to one principal: a platform-admin group makes a platform admin;
otherwise the groups must give roles on one tenant (the stronger of admin and viewer counts). A
person whose groups give roles on several tenants is refused (403), saying so, until principals
with several grants are built; one whose groups give none is refused too. Audit entries name the
person by the token's name or email and its subject at its issuer.
"""

from __future__ import annotations

from typing import Any

from gpuplex.core.access import Principal, Role
from gpuplex.core.access.oidc_groups import Grant, GroupRule, grants_of
from gpuplex.errors import ErrorCode, IdentityProviderUnavailable, OidcTokenError
from gpuplex.server.context import ServerContext
from gpuplex.server.problems import ApiProblem


def oidc_principal(ctx: ServerContext, token: str) -> Principal:
    applied = ctx.current.get()
    oidc = applied.spec.auth.oidc if applied is not None else None
    if applied is None or oidc is None:
        raise ApiProblem(
            ErrorCode.UNAUTHENTICATED,
            "this control plane takes no identity-provider tokens (the applied spec has no "
            "auth.oidc): use a gpuplex token",
        )
    try:
        claims = ctx.issuer_keys.of(oidc.issuer).verify(
            token, audience=oidc.expected_audience, skew_s=oidc.clock_skew_s
        )
    except OidcTokenError as error:
        raise ApiProblem(ErrorCode.UNAUTHENTICATED, error.message) from None
    except IdentityProviderUnavailable as error:
        raise ApiProblem(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, error.message) from None
    rules = [GroupRule(r.group, r.role, r.tenant) for r in oidc.roles]
    grants = grants_of(_groups(claims, oidc.groups_claim), rules, applied.tenant_names)
    return _one_principal(grants, claims, oidc.issuer)


def _groups(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []


def _one_principal(grants: list[Grant], claims: dict[str, Any], issuer: str) -> Principal:
    subject = str(claims["sub"])
    name = next(
        (str(claims[c]) for c in ("email", "preferred_username", "name") if claims.get(c)),
        subject,
    )
    common = {"name": name, "issuer": issuer, "subject": subject}
    if any(g.role is Role.PLATFORM_ADMIN for g in grants):
        return Principal(role=Role.PLATFORM_ADMIN, **common)
    tenants = sorted({g.tenant for g in grants if g.tenant is not None})
    if not tenants:
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            "signed in, but none of your groups gives a role in gpuplex (auth.oidc.roles)",
        )
    if len(tenants) > 1:
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            f"your groups give roles on several tenants ({', '.join(tenants)}); this version "
            "takes one tenant per identity-provider token: use a gpuplex token per tenant",
        )
    admin = any(g.role is Role.TENANT_ADMIN for g in grants)
    role = Role.TENANT_ADMIN if admin else Role.TENANT_VIEWER
    return Principal(role=role, tenant=tenants[0], **common)
