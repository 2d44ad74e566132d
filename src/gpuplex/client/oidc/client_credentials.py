"""A service account's token from the identity provider: the OAuth 2.0 client credentials grant
(RFC 6749 4.4), the client authenticated with HTTP Basic (client_secret_basic, RFC 6749 2.3.1).

The secret comes from an environment variable or a file, named on the command line, never the
secret itself (a command line shows in `ps` and in shell history).
"""

from __future__ import annotations

import base64
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from gpuplex.client.oidc.provider import post_form, refused
from gpuplex.errors import ErrorCode, RequestRefused
from gpuplex.settings import environment_value


@dataclass(frozen=True, slots=True)
class ServiceAccountClient:
    """Where a service account gets its tokens: its client, the provider's token endpoint, and
    where its secret is (one of `secret_env`, `secret_file`)."""

    client_id: str
    token_endpoint: str
    scopes: tuple[str, ...]
    audience: str | None
    secret_env: str | None = None
    secret_file: str | None = None


def secret_of(account: ServiceAccountClient) -> str:
    if account.secret_env is not None:
        value = environment_value(account.secret_env)
        if not value:
            raise RequestRefused(
                ErrorCode.INVALID_REQUEST,
                f"${account.secret_env} is not set: it should hold the service account's secret",
            )
        return value
    if account.secret_file is not None:
        try:
            return Path(account.secret_file).read_text(encoding="utf-8").strip()
        except OSError as error:
            raise RequestRefused(
                ErrorCode.INVALID_REQUEST,
                f"{account.secret_file}: {error.strerror}: it should hold the service "
                "account's secret",
            ) from None
    raise RequestRefused(
        ErrorCode.INVALID_REQUEST,
        "give --client-secret-env or --client-secret-file for the service account's secret",
    )


def token_for(account: ServiceAccountClient, now_s: float) -> tuple[str, float]:
    """A fresh token for the service account, and when it expires (seconds since the epoch)."""
    secret = secret_of(account)
    pair = ":".join(urllib.parse.quote(part, safe="") for part in (account.client_id, secret))
    form = {"grant_type": "client_credentials"}
    if account.scopes:
        form["scope"] = " ".join(account.scopes)
    if account.audience:
        form["resource"] = account.audience  # RFC 8707, for providers that issue JWTs per API
    basic = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    status, got = post_form(account.token_endpoint, form, authorization=basic)
    token = got.get("access_token")
    if status != 200 or not isinstance(token, str):
        said = got.get("error_description") or got.get("error") or "no reason given"
        raise refused(f"the identity provider refused the service account ({status}): {said}")
    return token, now_s + float(got.get("expires_in", 300))
