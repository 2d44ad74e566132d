"""A bearer token from the company's identity provider as a Principal: checked against the applied
spec's `auth.oidc` (signature with the issuer's keys, issuer, audience, expiry), then the person's
groups become roles by its rules (core.access.oidc_groups).

A request acts as one principal: a platform-admin group makes a platform admin; otherwise a
tenant role, the stronger of admin and viewer on that tenant. A person whose groups give roles on
several tenants says which tenant a request is for (the `X-Gpuplex-Tenant` header, else the
request's `{tenant}` path parameter), so each request sees one tenant's data, as with a gpuplex
token; without either they are refused (403), told their choices. One whose groups give no role is
refused too. Audit entries name the person by the token's name or email and its subject at its
issuer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi.concurrency import run_in_threadpool

from gpuplex.clock import Clock
from gpuplex.core.access import Principal, Role
from gpuplex.core.access.oidc_groups import Grant, GroupRule, grants_of
from gpuplex.errors import ErrorCode, OidcTokenError
from gpuplex.oidc.keys import IssuerKeysCache
from gpuplex.oidc.tokens import refuse_id_token
from gpuplex.revision import AppliedRevisions
from gpuplex.server.credential_grants import note_groups_seen
from gpuplex.server.problems import ApiProblem
from gpuplex.store.credential_grants import OidcPeople

#: Where a person with roles on several tenants says which one a request is for.
TENANT_HEADER = "X-Gpuplex-Tenant"
NO_ROLE = "signed in, but none of your groups gives a role in gpuplex (auth.oidc.roles)"


#: The tenant a request says it is for: (the header's, the path's); either may be None.
TenantChoice = tuple[str | None, str | None]


@dataclass(frozen=True, slots=True)
class OidcIdentities:
    """What makes a principal of an identity provider's person: the applied spec (its
    `auth.oidc` and rules), the provider's keys, the people as last seen, and the clock their
    sightings are stamped on."""

    current: AppliedRevisions
    #: per issuer, on the system clock whatever `clock` is: the provider's tokens expire in real time
    issuer_keys: IssuerKeysCache
    people: OidcPeople
    clock: Clock


async def oidc_principal(
    identities: OidcIdentities, token: str, chosen: TenantChoice | None = None
) -> Principal:
    """The person (or service account) an identity provider's bearer token speaks for. Called
    on the event loop: a key-set fetch it needs is awaited, holding no worker thread, so
    gpuplex's own tokens and /healthz never wait on the provider. An unreadable provider is
    IdentityProviderUnavailable (503, with Retry-After). What reads the store (the applied
    revision, the person's groups as last seen) runs in a worker thread."""
    applied = await run_in_threadpool(identities.current.get)
    oidc = applied.spec.auth.oidc if applied is not None else None
    if applied is None or oidc is None:
        raise ApiProblem(
            ErrorCode.UNAUTHENTICATED,
            "this control plane takes no identity-provider tokens (the applied spec has no "
            "auth.oidc): use a gpuplex token",
        )
    try:
        claims = await identities.issuer_keys.of(oidc.issuer).verified(
            token, audience=oidc.expected_audience, skew_s=oidc.clock_skew_s
        )
        if not oidc.accept_id_tokens:
            refuse_id_token(token, claims)
    except OidcTokenError as error:
        raise ApiProblem(ErrorCode.UNAUTHENTICATED, error.message) from None
    subject = str(claims["sub"])
    return await run_in_threadpool(
        principal_of_groups,
        identities,
        groups_of(claims, oidc.groups_claim),
        subject,
        person_name(claims, subject),
        oidc.issuer,
        chosen,
    )


def principal_of_groups(
    identities: OidcIdentities,
    groups: list[str],
    subject: str,
    name: str,
    issuer: str,
    chosen: TenantChoice | None = None,
) -> Principal:
    """A person's principal from their groups, by the applied spec's rules as they are now (a
    dashboard session keeps the groups its sign-in saw and takes the rules afresh each time).
    `chosen`: the tenant the request acts on, for a person with roles on several."""
    said, in_path = chosen if chosen is not None else (None, None)
    note_groups_seen(  # what they made follows these groups
        identities.people, identities.current, identities.clock, groups, subject, name, issuer
    )
    grants = grants_for(identities.current, groups, issuer)
    common = {"name": name, "issuer": issuer, "subject": subject}
    if any(g.role is Role.PLATFORM_ADMIN for g in grants):
        return Principal(role=Role.PLATFORM_ADMIN, **common)
    tenants = sorted({g.tenant for g in grants if g.tenant is not None})
    if not tenants:
        raise ApiProblem(ErrorCode.FORBIDDEN, NO_ROLE)
    # the path's tenant picks among the person's own; another's is left to RBAC (404, as for a token)
    tenant = said or (in_path if in_path in tenants else None)
    if tenant is None and len(tenants) > 1:
        raise ApiProblem(
            ErrorCode.FORBIDDEN,
            f"your groups give roles on several tenants ({', '.join(tenants)}): say which this "
            f"request is for with the {TENANT_HEADER} header (the dashboard asks you)",
        )
    tenant = tenant or tenants[0]
    if tenant not in tenants:
        raise ApiProblem(ErrorCode.FORBIDDEN, f"your groups give no role on tenant {tenant!r}")
    admin = any(g.role is Role.TENANT_ADMIN and g.tenant == tenant for g in grants)
    role = Role.TENANT_ADMIN if admin else Role.TENANT_VIEWER
    return Principal(role=role, tenant=tenant, **common)


def grants_for(current: AppliedRevisions, groups: list[str], issuer: str) -> list[Grant]:
    """What a person's groups give under the rules applied now. A person signed in at an issuer
    the spec no longer names is 401."""
    applied = current.get()
    oidc = applied.spec.auth.oidc if applied is not None else None
    if applied is None or oidc is None or oidc.issuer != issuer:
        raise ApiProblem(
            ErrorCode.UNAUTHENTICATED,
            "the applied spec no longer takes sign-ins from this identity provider (auth.oidc)",
        )
    rules = [GroupRule(r.group, r.role, r.tenant) for r in oidc.roles]
    return grants_of(groups, rules, applied.tenant_names)


def person_name(claims: dict[str, Any], subject: str) -> str:
    """What the audit log calls a person: their email, user name or name, else their subject."""
    return next(
        (str(claims[c]) for c in ("email", "preferred_username", "name") if claims.get(c)),
        subject,
    )


def groups_of(claims: dict[str, Any], claim: str) -> list[str]:
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []
