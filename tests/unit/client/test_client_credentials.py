"""A service account's token (the client credentials grant), against a token endpoint on loopback:
the client authenticates with HTTP Basic, its id and secret form-encoded first (RFC 6749 2.3.1),
so a secret holding `:`, `%` or `+` reaches the provider as it is; the provider's refusal is said
in its words; an answer that is no token answer is an error, never a traceback."""

from __future__ import annotations

import base64
import urllib.parse

import pytest

from gpuplex.client.oidc.client_credentials import ServiceAccountClient, token_for
from gpuplex.errors import ErrorCode, RequestRefused
from tests.unit.client.token_endpoint import TokenEndpoint

SECRET = "s3:cr%t+/é"  # noqa: S105 - a made-up secret with every character Basic trips on


def account(endpoint: TokenEndpoint, monkeypatch: pytest.MonkeyPatch) -> ServiceAccountClient:
    monkeypatch.setenv("ROBOT_SECRET", SECRET)
    return ServiceAccountClient(
        "ci:robot",
        endpoint.url,
        ("jobs",),
        "urn:gpuplex:api",
        secret_env="ROBOT_SECRET",  # noqa: S106
    )


def test_the_secret_goes_form_encoded_in_basic_and_the_token_comes_back(
    endpoint: TokenEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint.answer_json(200, {"access_token": "eyJ.a.b", "token_type": "Bearer", "expires_in": 90})
    token, expires = token_for(account(endpoint, monkeypatch), now_s=1000.0)
    assert (token, expires) == ("eyJ.a.b", 1090.0)
    assert endpoint.forms == [
        {"grant_type": "client_credentials", "scope": "jobs", "resource": "urn:gpuplex:api"}
    ]  # the secret is never in the form
    scheme, encoded = str(endpoint.authorizations[0]).split(" ", 1)
    user, password = base64.b64decode(encoded).decode().split(":")  # one colon: both encoded
    assert scheme == "Basic"
    assert (urllib.parse.unquote(user), urllib.parse.unquote(password)) == ("ci:robot", SECRET)


def test_the_providers_refusal_is_said_in_its_words(
    endpoint: TokenEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint.answer_json(401, {"error": "invalid_client", "error_description": 'no "robot" here'})
    with pytest.raises(RequestRefused, match='no "robot" here') as refused:
        token_for(account(endpoint, monkeypatch), now_s=0.0)
    assert refused.value.code is ErrorCode.UNAUTHENTICATED


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ((503, "text/html", b"<html>down</html>"), ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE),
        ((200, "application/json", b"[1, 2]"), ErrorCode.UNAUTHENTICATED),
        ((200, "application/json", b'{"access_token": 7}'), ErrorCode.UNAUTHENTICATED),
    ],
)
def test_an_answer_that_is_no_token_is_an_error(
    endpoint: TokenEndpoint,
    monkeypatch: pytest.MonkeyPatch,
    answer: tuple[int, str, bytes],
    code: ErrorCode,
) -> None:
    endpoint.answers.append(answer)
    with pytest.raises(RequestRefused) as refused:
        token_for(account(endpoint, monkeypatch), now_s=0.0)
    assert refused.value.code is code
