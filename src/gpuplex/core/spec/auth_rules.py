"""Rules for `auth.oidc` that pydantic cannot express: the secret comes from one place (never the
spec), `openid` is among the scopes, each group rule names its tenant one way (a `tenant` of the
spec, or one `{tenant}` in the group's name), and a platform-admin rule names none."""

from __future__ import annotations

from collections.abc import Iterator

from gpuplex.core.access import Role
from gpuplex.core.spec.auth import TENANT_PLACEHOLDER
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.errors import FieldPath, SpecProblem


def check_auth(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    oidc = spec.auth.oidc
    if oidc is None:
        return
    base: FieldPath = ("auth", "oidc")
    if oidc.client_secret_env is not None and oidc.client_secret_file is not None:
        yield SpecProblem(
            (*base, "client_secret_env"),
            "give the client secret one way: client_secret_env or client_secret_file",
        )
    if "openid" not in oidc.scopes:
        yield SpecProblem((*base, "scopes"), "the scopes must include openid")
    tenants = [t.name for t in spec.tenants]
    for r, rule in enumerate(oidc.roles):
        path: FieldPath = (*base, "roles", r)
        placeholders = rule.group.count(TENANT_PLACEHOLDER)
        if rule.role is Role.PLATFORM_ADMIN:
            if rule.tenant is not None or placeholders:
                yield SpecProblem(
                    (*path, "role"), "platform-admin is for every tenant: name no tenant"
                )
            continue
        if placeholders > 1:
            yield SpecProblem((*path, "group"), "a group pattern holds {tenant} once")
        elif placeholders == 1 and rule.tenant is not None:
            yield SpecProblem(
                (*path, "tenant"), "give the tenant one way: tenant, or {tenant} in the group"
            )
        elif placeholders == 0 and rule.tenant is None:
            yield SpecProblem(
                (*path, "tenant"),
                f"a {rule.role} rule names its tenant: tenant, or {{tenant}} in the group",
            )
        elif rule.tenant is not None and rule.tenant not in tenants:
            hint = did_you_mean(rule.tenant, tenants)
            yield SpecProblem((*path, "tenant"), f"unknown tenant {rule.tenant!r}{hint}")
