"""Tokens from the identity provider: one that holds is taken; a wrong audience, a wrong issuer, an
expired one, one not yet valid, one signed by a key rotated out of the key set, `alg: none`, an
HS256 token "signed" with the provider's public key, a tampered payload and garbage are all
refused, with one error (`unauthenticated`) that says which."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from joserfc.jws import JWSRegistry

from gpuplex.errors import ErrorCode, OidcTokenError
from gpuplex.oidc.tokens import (
    MAX_TOKEN_LIFETIME_S,
    looks_like_jwt,
    refuse_id_token,
    verified_claims,
)

ISSUER = "https://login.example.com/realms/acme"
AUDIENCE = "gpuplex"
NOW = 1_800_000_000
KEY = RSAKey.generate_key(2048, parameters={"kid": "current"})
OLD_KEY = RSAKey.generate_key(2048, parameters={"kid": "rotated-out"})
EC_KEY = ECKey.generate_key("P-256", parameters={"kid": "ec"})
JWKS = {"keys": [KEY.as_dict(private=False), EC_KEY.as_dict(private=False)]}


def claims(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": NOW - 10,
        "exp": NOW + 300,
        "groups": ["gpu-contoso-viewers"],
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def signed(payload: dict[str, Any], key: Any = KEY, alg: str = "RS256") -> str:
    return jwt.encode({"alg": alg, "kid": key.kid}, payload, key)


def check(token: str) -> dict[str, Any]:
    return verified_claims(token, JWKS, issuer=ISSUER, audience=AUDIENCE, now_s=NOW, skew_s=60)


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_a_token_that_holds_is_taken_rsa_and_ec() -> None:
    assert check(signed(claims()))["sub"] == "alice"
    assert check(signed(claims(), EC_KEY, "ES256"))["groups"] == ["gpu-contoso-viewers"]
    assert check(signed(claims(aud=["other", AUDIENCE])))["sub"] == "alice"
    assert check(signed(claims(exp=NOW - 30)))["sub"] == "alice"  # within the clock skew
    assert check(signed(claims(exp=NOW + MAX_TOKEN_LIFETIME_S)))["sub"] == "alice"  # a day: taken


def _none_token() -> str:
    header = b64(json.dumps({"alg": "none", "kid": "current"}).encode())
    return f"{header}.{b64(json.dumps(claims()).encode())}."


def _hs256_with_the_public_key() -> str:
    """The classic confusion: HMAC with the provider's public key (which anyone can fetch)."""
    header = b64(json.dumps({"alg": "HS256", "kid": "current"}).encode())
    body = b64(json.dumps(claims()).encode())
    secret = KEY.as_pem(private=False)
    mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{b64(mac)}"


def _with_exp(literal: str) -> str:
    """A token signed over a payload whose `exp` is a JSON literal a strict encoder never writes
    (`Infinity`, `NaN`, which Python's decoder reads), or `true`."""
    body = json.dumps(claims(exp=None))[:-1] + f', "exp": {literal}}}'
    header = b64(json.dumps({"alg": "RS256", "kid": KEY.kid}).encode())
    signing_input = f"{header}.{b64(body.encode())}"
    signature = JWSRegistry.algorithms["RS256"].sign(signing_input.encode(), KEY)
    return f"{signing_input}.{b64(signature)}"


def _tampered() -> str:
    header, _, signature = signed(claims()).split(".")
    forged = b64(json.dumps(claims(sub="mallory", groups=["gpu-platform-admins"])).encode())
    return f"{header}.{forged}.{signature}"


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (signed(claims(aud="someone-else")), "claims"),
        (signed(claims(iss="https://evil.example.com")), "claims"),
        (signed(claims(exp=NOW - 3600)), "claims"),
        (signed(claims(nbf=NOW + 3600)), "claims"),
        (signed(claims(exp=None)), "claims"),
        (signed(claims(exp=1e20)), "claims"),
        (signed(claims(exp=NOW + MAX_TOKEN_LIFETIME_S + 61)), "claims"),
        (_with_exp("Infinity"), "claims"),
        (_with_exp("NaN"), "claims"),
        (_with_exp("true"), "claims"),
        (signed(claims(sub=None)), "claims"),
        (signed(claims(), OLD_KEY), "signature"),
        (_none_token(), "signature"),
        (_hs256_with_the_public_key(), "signature"),
        (_tampered(), "signature"),
        ("not-a-jwt", "signature"),
        ("", "signature"),
    ],
    ids=[
        "wrong-audience",
        "wrong-issuer",
        "expired",
        "not-yet-valid",
        "no-expiry",
        "exp-1e20",
        "exp-past-a-day",
        "exp-infinity",
        "exp-nan",
        "exp-true",
        "no-subject",
        "rotated-out-key",
        "alg-none",
        "hs256-with-public-key",
        "tampered-payload",
        "garbage",
        "empty",
    ],
)
def test_every_bad_token_is_refused_with_one_code(token: str, said: str) -> None:
    with pytest.raises(OidcTokenError) as refused:
        check(token)
    assert refused.value.code is ErrorCode.UNAUTHENTICATED
    assert said in refused.value.message


def test_a_key_set_that_cannot_be_read_refuses_every_token() -> None:
    with pytest.raises(OidcTokenError, match="key set"):
        verified_claims(
            signed(claims()),
            {"keys": "nope"},
            issuer=ISSUER,
            audience=AUDIENCE,
            now_s=NOW,
            skew_s=0,
        )


@pytest.mark.parametrize(
    ("text", "is_jwt"),
    [
        (jwt.encode({"alg": "RS256"}, claims(), KEY), True),
        ("a.b.c", True),
        ("gpx_ab12cd34_" + "s" * 43, False),
        ("gpt_ab12cd34_" + "s" * 43, False),
        ("gpx_a.b.c", False),
        ("a.b", False),
        ("a.b.c.d", False),
    ],
)
def test_what_looks_like_a_jwt(text: str, is_jwt: bool) -> None:
    assert looks_like_jwt(text) is is_jwt


@pytest.mark.parametrize(
    ("marker", "why"),
    [
        ({"nonce": "n-0123"}, "nonce"),
        ({"at_hash": "x"}, "at_hash"),
        ({"c_hash": "x"}, "c_hash"),
        ({"s_hash": "x"}, "s_hash"),
        ({"typ": "ID"}, "typ: ID"),
    ],
)
def test_an_id_token_is_refused_as_an_api_bearer(marker: dict[str, str], why: str) -> None:
    token = signed(claims(**marker))
    with pytest.raises(OidcTokenError, match=f"an ID token \\({why}\\)"):
        refuse_id_token(token, check(token))


def test_an_access_token_is_taken_as_an_api_bearer() -> None:
    plain = signed(claims(scope="openid gpuplex", client_id="svc-ci"))
    refuse_id_token(plain, check(plain))  # no claim only an ID token carries
    rfc9068 = jwt.encode({"alg": "RS256", "kid": KEY.kid, "typ": "at+jwt"}, claims(), KEY)
    refuse_id_token(rfc9068, check(rfc9068))  # its header says what it is
