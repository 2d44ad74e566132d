"""`auth:` in gpuplex.yaml: signing in with the company's identity provider (OpenID Connect).

`auth.oidc` names the issuer (its discovery document and keys are fetched from it), the client
gpuplex is registered as, the scopes it asks for, the claim that carries a person's groups, and how
groups become gpuplex roles. The client secret is never in the spec: it comes from an environment
variable or a file, named here.

    auth:
      oidc:
        issuer: https://login.example.com/realms/acme
        client_id: gpuplex
        client_secret_env: GPUPLEX_OIDC_CLIENT_SECRET
        groups_claim: groups
        roles:
          - {group: gpu-platform-admins, role: platform-admin}
          - {group: "gpu-{tenant}-admins", role: tenant-admin}      # one rule for every tenant
          - {group: contoso-readers, role: tenant-viewer, tenant: contoso}
        gateway:                          # optional: the gateway takes service accounts' tokens
          tenant_claim: gpuplex_tenant    # the claim naming the tenant the account belongs to
          audience: urn:gpuplex:gateway   # default: the audience above

The control plane's API takes the provider's tokens by it (server/oidc_principal.py),
`core.access.oidc_groups` maps a person's groups to roles, the dashboard signs people in with it
(server/sign_in.py), and `gpuplex login` gets a person's or a service account's token for the CLI.
With `gateway:`, the gateway takes a service account's client-credential token as a caller of the
tenant its `tenant_claim` names (gateway/service_accounts.py); without it, the gateway takes API
keys only.
"""

from __future__ import annotations

from pydantic import Field, StrictInt, field_validator

from gpuplex.core.access import Role
from gpuplex.core.spec.fields import DnsLabel, SpecModel

#: Where a group pattern puts the tenant's name.
TENANT_PLACEHOLDER = "{tenant}"
#: Loopback issuers may be plain http (a provider on the same machine, in tests or a lab).
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: Registered claims (RFC 7519) that say something about the token, never the tenant.
_NOT_TENANT_CLAIMS = frozenset({"iss", "aud", "exp", "nbf", "iat", "jti"})


class GroupRoleSpec(SpecModel):
    """Members of `group` get `role`; for a tenant role, on `tenant`, or on the tenant a
    `{tenant}` in the group's name stands for."""

    group: str = Field(min_length=1, max_length=256)
    role: Role
    tenant: DnsLabel | None = None

    @property
    def is_pattern(self) -> bool:
        return TENANT_PLACEHOLDER in self.group


class OidcGatewaySpec(SpecModel):
    """The gateway takes the provider's access tokens for service accounts (the client
    credentials grant): `tenant_claim` names the tenant the account calls as; the token's `aud`
    must hold `audience` (default: auth.oidc's audience)."""

    tenant_claim: str = Field(min_length=1, max_length=256)
    audience: str | None = Field(default=None, min_length=1, max_length=2048)

    @field_validator("tenant_claim")
    @classmethod
    def _names_a_claim_of_the_account(cls, value: str) -> str:
        if value in _NOT_TENANT_CLAIMS:
            raise ValueError(
                f"`{value}` is a registered claim about the token itself, not its account: name "
                "the claim the identity provider puts the tenant in (e.g. gpuplex_tenant)"
            )
        return value


class OidcSpec(SpecModel):
    issuer: str = Field(min_length=1, max_length=2048, description="The issuer URL, exactly.")
    client_id: str = Field(min_length=1, max_length=256)
    client_secret_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    client_secret_file: str | None = Field(default=None, min_length=1)
    audience: str | None = Field(
        default=None, min_length=1, description="The `aud` tokens must carry (default client_id)."
    )
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    groups_claim: str = Field(default="groups", min_length=1, max_length=256)
    clock_skew_s: StrictInt = Field(default=60, ge=0, le=300)
    accept_id_tokens: bool = Field(
        default=False,
        description="Take ID tokens as API bearers too (by default only access tokens).",
    )
    roles: list[GroupRoleSpec] = Field(default_factory=list)
    gateway: OidcGatewaySpec | None = None

    @field_validator("issuer")
    @classmethod
    def _issuer_is_https(cls, value: str) -> str:
        if value.startswith("https://"):
            return value
        host = value.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)[0]
        if value.startswith("http://") and host in _LOOPBACK_HOSTS:
            return value
        raise ValueError("the issuer must be an https:// URL (plain http only on loopback)")

    @property
    def expected_audience(self) -> str:
        return self.audience or self.client_id

    @property
    def gateway_audience(self) -> str | None:
        """The `aud` the gateway's service-account tokens must carry; None: it takes none."""
        if self.gateway is None:
            return None
        return self.gateway.audience or self.expected_audience


class AuthSpec(SpecModel):
    oidc: OidcSpec | None = None
