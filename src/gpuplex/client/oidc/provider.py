"""Talking to the identity provider as a client: its discovery document, and the form posts and JSON
reads its endpoints answer (bounded in time and size). The device flow (device_flow.py) and the
client credentials grant (client_credentials.py) call the provider through these.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from gpuplex.errors import ErrorCode, RequestRefused

TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 1024 * 1024


def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document, which must name the issuer exactly."""
    found = get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if found.get("issuer") != issuer:
        raise refused(f"{issuer}: its discovery document names issuer {found.get('issuer')!r}")
    return found


def post_form(
    url: str, form: dict[str, str], authorization: str | None = None
) -> tuple[int, dict[str, Any]]:
    from urllib.error import HTTPError, URLError  # urllib.request loads http.client, ssl
    from urllib.request import Request, urlopen  # and email: only for a call

    body = urllib.parse.urlencode(form).encode()
    headers = {"content-type": "application/x-www-form-urlencoded"}
    if authorization is not None:
        headers["authorization"] = authorization
    request = Request(  # noqa: S310 - the provider's https (or loopback) URL
        url, data=body, headers=headers
    )
    try:
        with urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
            return reply.status, _parsed(reply.read(MAX_ANSWER_BYTES))
    except HTTPError as error:  # 400 carries the grant's error codes
        return error.code, _parsed(error.read(MAX_ANSWER_BYTES))
    except (URLError, OSError) as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, f"{url}: {error}") from None


def post_json(url: str, form: dict[str, str]) -> dict[str, Any]:
    """POST a form; the answer's JSON object, or an error when the answer is not 200."""
    status, got = post_form(url, form)
    if status != 200:
        raise refused(f"{url} answered {status}: {got.get('error_description') or got}")
    return got


def get_json(url: str) -> dict[str, Any]:
    """GET a JSON object (a discovery document)."""
    from urllib.error import URLError  # urllib.request loads http.client, ssl
    from urllib.request import Request, urlopen  # and email: only for a call

    request = Request(url, method="GET")  # noqa: S310
    try:
        with urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
            return _parsed(reply.read(MAX_ANSWER_BYTES))
    except (URLError, OSError) as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, f"{url}: {error}") from None


def _parsed(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def refused(message: str) -> RequestRefused:
    return RequestRefused(ErrorCode.UNAUTHENTICATED, message)
