"""gpuplex as an OAuth 2.0 client of the identity provider: Authlib's `OAuth2Client` builds the
requests (the authorization URL with PKCE S256, the token endpoint's grants, client
authentication) and reads the token endpoint's answers, and gpuplex's one HTTP client
(gpuplex.http_client) carries them, bounded in time and size.

The flows built on it: the dashboard's authorization code flow (server/oidc_code_flow.py), and the
CLI's device authorization grant and client credentials grant (client/oidc/). A token endpoint that
refuses raises `ProviderRefusal` with the provider's `error` code; one that cannot be had
(unreachable, a stall, a 5xx) is OSError; an answer that is no JSON object, ValueError.

Two departures from Authlib's defaults:
- HTTP Basic client authentication form-encodes the client id and secret before joining them
  (RFC 6749 2.3.1), as providers decode them; Authlib sends them raw, which a secret holding `%`,
  `+` or `:` does not survive.
- A refusal keeps the provider's error code whatever its description holds: Authlib's own error
  class raises ValueError on a description with characters RFC 6749 does not allow, which would hide
  `authorization_pending` behind a provider's sloppy wording.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Mapping
from typing import Any

from authlib.common.urls import url_encode
from authlib.oauth2.client import OAuth2Client

from gpuplex.http_client import HttpAnswer, call

__all__ = ["ProviderRefusal", "fetch_token", "oauth_client"]

#: A token endpoint's answer larger than this is not one.
MAX_ANSWER_BYTES = 1024 * 1024


class ProviderRefusal(Exception):
    """The token endpoint's error answer (RFC 6749 5.2): its `error` code and description."""

    def __init__(self, error: str | None = None, description: str | None = None, **_: Any) -> None:
        super().__init__(f"{error}: {description}" if description else str(error))
        self.error = str(error or "")
        self.description = str(description or "")


class GpuplexOAuth2Client(OAuth2Client):  # type: ignore[misc]  # Authlib ships no types
    oauth_error_class = ProviderRefusal


class ProviderAnswer:
    """An answer as Authlib reads one (the shape of a `requests` response)."""

    def __init__(self, url: str, answer: HttpAnswer) -> None:
        self.url = url
        self.status_code = answer.status
        self._answer = answer

    def json(self) -> Any:
        return json.loads(self._answer.body)  # ValueError when it is not JSON

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            raise ConnectionError(f"{self.url}: answered {self.status_code}")


class ProviderSession:
    """What Authlib's client sends its requests through: form posts over gpuplex.http_client."""

    def __init__(self, timeout_s: float, environment_proxy: bool) -> None:
        self.timeout_s = timeout_s
        self.environment_proxy = environment_proxy

    def post(
        self,
        url: str,
        data: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        auth: Any = None,
        **_: Any,
    ) -> ProviderAnswer:
        body = url_encode(list((data or {}).items()))
        sent = {"Accept": "application/json", **(headers or {})}
        if auth is not None:  # Authlib's ClientAuth: adds the client's credentials
            url, sent, body = auth.prepare("POST", url, sent, body)
        answer = call(
            "POST",
            url,
            headers=sent,
            body=body.encode("utf-8"),
            timeout_s=self.timeout_s,
            deadline_s=self.timeout_s,
            max_bytes=MAX_ANSWER_BYTES,
            environment_proxy=self.environment_proxy,
        )
        if not answer.complete:
            raise ConnectionError(f"{url}: the answer is over {MAX_ANSWER_BYTES} bytes")
        return ProviderAnswer(url, answer)


def oauth_client(
    client_id: str,
    client_secret: str | None = None,
    *,
    scopes: tuple[str, ...] | list[str] = (),
    redirect_uri: str | None = None,
    timeout_s: float,
    environment_proxy: bool = False,
) -> GpuplexOAuth2Client:
    """Authlib's client for one registered client: HTTP Basic when it has a secret, else a public
    client (its id in the form); PKCE with S256 for the authorization code flow."""
    client = GpuplexOAuth2Client(
        ProviderSession(timeout_s, environment_proxy),
        client_id=client_id,
        client_secret=client_secret,
        scope=" ".join(scopes) or None,
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
    )
    client.register_client_auth_method(("client_secret_basic", _basic_form_encoded))
    return client


def _basic_form_encoded(
    client: Any, method: str, uri: str, headers: dict[str, str], body: str
) -> tuple[str, dict[str, str], str]:
    """client_secret_basic as RFC 6749 2.3.1 writes it: each part form-encoded, then joined."""
    parts = (client.client_id, client.client_secret)
    pair = ":".join(urllib.parse.quote(part, safe="") for part in parts)
    basic = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return uri, {**headers, "Authorization": basic}, body


def fetch_token(client: GpuplexOAuth2Client, url: str, **params: str) -> dict[str, Any]:
    """The token endpoint's answer to one grant (`grant_type` and its parameters). Raises
    ProviderRefusal (the provider's error code), OSError (not had), or ValueError (an answer that
    is not a token answer, such as an `expires_in` that is no number)."""
    try:
        return dict(client.fetch_token(url, **params))
    except (ProviderRefusal, OSError):
        raise
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{url}: not a token answer ({error})") from None
