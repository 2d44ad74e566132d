"""Tokens from the company's identity provider (OpenID Connect), checked with joserfc: the
signature against the issuer's published keys (JWKS), then the claims: `iss` exactly the
issuer, `aud` holding gpuplex's audience, `exp` in the future but at most a day away
(`MAX_TOKEN_LIFETIME_S`), and `nbf`/`iat` not in the future, each with the spec's clock skew.

Only asymmetric algorithms are taken (`ALGORITHMS`): `alg: none` and HS256 (a token "signed" with
the provider's public key as an HMAC secret) are refused whatever key set is given, and a token
whose `kid` is not in the key set (a key the provider rotated out) does not verify. Fetching the
discovery document and the key set, and following rotation, is the caller's part; this module
decides on the token alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from gpuplex.errors import OidcTokenError

#: Signature algorithms an identity provider's tokens may use: asymmetric only.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")

#: The furthest `exp` taken, from now: providers issue access and ID tokens for minutes to hours;
#: one that claims to live longer (`exp: 1e20`, a token minted by a key that leaked, used for
#: ever) is refused.
MAX_TOKEN_LIFETIME_S = 24 * 3600


def looks_like_jwt(token: str) -> bool:
    """Three dot-separated parts: not one of gpuplex's own credentials (`gpx_...`, `gpt_...`,
    which hold no dot), so worth verifying as the identity provider's."""
    return token.count(".") == 2 and not token.startswith(("gpx_", "gpt_"))


def verified_claims(
    token: str,
    jwks: Mapping[str, Any],
    *,
    issuer: str,
    audience: str,
    now_s: float,
    skew_s: int,
) -> dict[str, Any]:
    """The token's claims once its signature and claims hold; OidcTokenError saying why not."""
    try:
        keys = KeySet.import_key_set(dict(jwks))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError) as error:
        raise OidcTokenError(f"the issuer's key set cannot be read: {error}") from None
    try:
        decoded = jwt.decode(token, keys, algorithms=list(ALGORITHMS))
    except (JoseError, ValueError, TypeError) as error:
        raise OidcTokenError(f"the token's signature does not verify: {_said(error)}") from None
    claims = dict(decoded.claims)
    registry = jwt.JWTClaimsRegistry(
        now=int(now_s),
        leeway=skew_s,
        iss={"essential": True, "value": issuer},
        aud={"essential": True, "value": audience},
        exp={"essential": True},
        sub={"essential": True},
    )
    try:
        registry.validate(claims)
    except (JoseError, ValueError, TypeError) as error:
        raise OidcTokenError(f"the token's claims do not hold: {_said(error)}") from None
    # joserfc has checked `exp` is a NumericDate (a finite number, not a boolean)
    if float(claims["exp"]) - now_s > MAX_TOKEN_LIFETIME_S + skew_s:
        raise OidcTokenError(
            "the token's claims do not hold: its exp is more than "
            f"{MAX_TOKEN_LIFETIME_S // 3600} hours from now, the longest gpuplex takes"
        )
    return claims


#: Claims only an ID token carries (OpenID Connect Core 2, 3.1.3.6, 3.3.2.11; Keycloak marks its
#: own with `typ: ID`); RFC 9068 access tokens say `typ: at+jwt` in their header.
ID_TOKEN_CLAIMS = ("nonce", "at_hash", "c_hash", "s_hash")
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})


def refuse_id_token(token: str, claims: Mapping[str, Any]) -> None:
    """OidcTokenError when a verified bearer token is an ID token: an ID token tells the client
    it was issued to who signed in; it is not a grant to call an API (a site the person signed
    in to could replay it). A token whose header says it is an access token (`typ: at+jwt`)
    is one; otherwise one carrying a claim only ID tokens carry is refused."""
    try:
        header = jws.extract_compact(token.encode()).headers()
    except (JoseError, ValueError, TypeError):
        raise OidcTokenError("the token is not a signed JWT") from None
    if str(header.get("typ", "")).lower() in ACCESS_TOKEN_TYPES:
        return
    marked = [c for c in ID_TOKEN_CLAIMS if c in claims]
    if claims.get("typ") == "ID":
        marked.append("typ: ID")
    if marked:
        raise OidcTokenError(
            f"this is an ID token ({', '.join(marked)}), not an access token: send the access "
            "token your identity provider issued for gpuplex (an operator may take ID tokens "
            "with auth.oidc.accept_id_tokens)"
        )


def _said(error: Exception) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:200]
