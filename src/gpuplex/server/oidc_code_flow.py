"""The dashboard's sign-in with the identity provider: the authorization code flow with PKCE
(RFC 7636, S256) and a nonce (OpenID Connect Core 3.1.2.1).

`authorization_url` sends the browser to the provider; `exchange_code` trades the code the provider
sends back for tokens at its token endpoint (as a confidential client with HTTP Basic when the spec
names a client secret, else as a public client); Authlib builds both (gpuplex.oauth_client).
`signed_in_person` verifies the ID token (the issuer's keys, issuer, audience = client id, expiry, and the nonce of this sign-in) and reads the
person's groups: from the ID token when it carries the groups claim, else from the access token,
verified as the API verifies bearer tokens (auth.oidc.audience). A session lasts as long as the
token its groups came from, at most `MAX_SESSION_S`: groups are read again at each sign-in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplex.core.spec.auth import OidcSpec
from gpuplex.errors import IdentityProviderUnavailable, OidcTokenError
from gpuplex.oidc.keys import TIMEOUT_S, IssuerKeys
from gpuplex.server.oidc_principal import groups_of, person_name
from gpuplex.settings import environment_value

#: The longest a dashboard session lasts, whatever the provider's tokens say.
MAX_SESSION_S = 12 * 3600


def authorization_url(
    endpoint: str,
    oidc: OidcSpec,
    *,
    redirect_uri: str,
    state: str,
    nonce: str,
    code_verifier: str,
) -> str:
    """Where the browser goes to sign in: the code flow's request with PKCE (S256) and a nonce."""
    from gpuplex.oauth_client import oauth_client  # Authlib: loaded by the first sign-in

    client = oauth_client(
        oidc.client_id, scopes=oidc.scopes, redirect_uri=redirect_uri, timeout_s=TIMEOUT_S
    )
    url, _ = client.create_authorization_url(
        endpoint, state=state, code_verifier=code_verifier, nonce=nonce
    )
    return str(url)


def client_secret(oidc: OidcSpec) -> str | None:
    """The client secret the spec names (an environment variable or a file), or None for a
    public client; IdentityProviderUnavailable when the named one cannot be read."""
    if oidc.client_secret_env is not None:
        value = environment_value(oidc.client_secret_env)
        if not value:
            raise IdentityProviderUnavailable(
                f"auth.oidc.client_secret_env names ${oidc.client_secret_env}, which is not set "
                "in the control plane's environment"
            )
        return value
    if oidc.client_secret_file is not None:
        try:
            return Path(oidc.client_secret_file).read_text().strip()
        except OSError as error:
            raise IdentityProviderUnavailable(
                f"auth.oidc.client_secret_file {oidc.client_secret_file}: {error.strerror}"
            ) from None
    return None


def exchange_code(
    token_endpoint: str, oidc: OidcSpec, *, code: str, redirect_uri: str, code_verifier: str
) -> dict[str, Any]:
    """The provider's token answer for this code (`id_token`, `access_token`, ...), as a
    confidential client with HTTP Basic when the spec names a client secret, else as a public
    client. A provider that refuses the code is OidcTokenError; one that cannot be reached, or
    answers no token answer, IdentityProviderUnavailable."""
    from gpuplex.oauth_client import ProviderRefusal, fetch_token, oauth_client

    client = oauth_client(
        oidc.client_id, client_secret(oidc), redirect_uri=redirect_uri, timeout_s=TIMEOUT_S
    )
    try:
        answer = fetch_token(
            client,
            token_endpoint,
            grant_type="authorization_code",
            code=code,
            code_verifier=code_verifier,
        )
    except ProviderRefusal as refused:
        said = ": ".join(part[:200] for part in (refused.error, refused.description) if part)
        raise OidcTokenError(
            f"the identity provider refused the sign-in: {said or 'no reason given'}"
        ) from None
    except (OSError, ValueError) as error:
        raise IdentityProviderUnavailable(f"{token_endpoint}: {error}") from None
    if not isinstance(answer.get("id_token"), str):
        raise OidcTokenError(
            "the identity provider's answer has no ID token (is `openid` a scope?)"
        )
    return answer


@dataclass(frozen=True, slots=True)
class SignedInPerson:
    subject: str
    name: str
    groups: list[str]
    expires_at_s: float


def signed_in_person(
    keys: IssuerKeys, oidc: OidcSpec, tokens: dict[str, Any], *, nonce: str, now_s: float
) -> SignedInPerson:
    """Who the provider's tokens say signed in, once they verify; OidcTokenError saying why not."""
    id_claims = keys.verify(tokens["id_token"], audience=oidc.client_id, skew_s=oidc.clock_skew_s)
    if id_claims.get("nonce") != nonce:
        raise OidcTokenError("the ID token's nonce is not this sign-in's: start again")
    subject = str(id_claims["sub"])
    source = id_claims
    if oidc.groups_claim not in id_claims:
        access = tokens.get("access_token")
        if not isinstance(access, str):
            raise OidcTokenError(
                f"neither the ID token nor an access token carries the {oidc.groups_claim!r} claim"
            )
        source = keys.verify(access, audience=oidc.expected_audience, skew_s=oidc.clock_skew_s)
        if str(source["sub"]) != subject:
            raise OidcTokenError("the access token is for another subject than the ID token")
    expires = min(float(source["exp"]), float(id_claims["exp"]), now_s + MAX_SESSION_S)
    name = person_name(id_claims, person_name(source, subject))
    return SignedInPerson(subject, name, groups_of(source, oidc.groups_claim), expires)
