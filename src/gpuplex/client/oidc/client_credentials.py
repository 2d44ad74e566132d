"""A service account's token from the identity provider: the OAuth 2.0 client credentials grant
(RFC 6749 4.4), the client authenticated with HTTP Basic (client_secret_basic, RFC 6749 2.3.1),
sent by Authlib (gpuplex.oauth_client).

The secret comes from an environment variable or a file, named on the command line, never the
secret itself (a command line shows in `ps` and in shell history).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuplex.client.oidc.provider import TIMEOUT_S, refused
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
    from gpuplex.oauth_client import ProviderRefusal, fetch_token, oauth_client  # for a call only

    client = oauth_client(
        account.client_id,
        secret_of(account),
        scopes=account.scopes,
        timeout_s=TIMEOUT_S,
        environment_proxy=True,  # a job's container behind its company's proxy, as curl would
    )
    resource = {"resource": account.audience} if account.audience else {}  # RFC 8707
    try:
        got = fetch_token(
            client, account.token_endpoint, grant_type="client_credentials", **resource
        )
    except ProviderRefusal as said:
        raise refused(
            "the identity provider refused the service account: "
            f"{said.description or said.error or 'no reason given'}"
        ) from None
    except OSError as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, str(error)) from None
    except ValueError as error:
        raise refused(f"the identity provider's answer is not a token: {error}") from None
    token = got.get("access_token")
    if not isinstance(token, str):
        raise refused("the identity provider's answer holds no access token")
    return token, now_s + float(got.get("expires_in", 300))
