"""Talking to the identity provider as a client: its discovery document, and the device
authorization endpoint's form post (bounded in time and size). The token endpoint's grants go
through Authlib (gpuplex.oauth_client).
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, Any

from gpuplex.errors import ErrorCode, RequestRefused

if TYPE_CHECKING:
    from gpuplex.http_client import HttpAnswer

TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 1024 * 1024


def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document, which must name the issuer exactly."""
    found = get_json(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if found.get("issuer") != issuer:
        raise refused(f"{issuer}: its discovery document names issuer {found.get('issuer')!r}")
    return found


def post_json(url: str, form: dict[str, str]) -> dict[str, Any]:
    """POST a form; the answer's JSON object, or an error when the answer is not 200."""
    headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
    answer = _call("POST", url, headers, urllib.parse.urlencode(form).encode())
    got = answer.json_object()
    if answer.status != 200:
        raise refused(f"{url} answered {answer.status}: {got.get('error_description') or got}")
    return got


def get_json(url: str) -> dict[str, Any]:
    """GET a JSON object (a discovery document)."""
    return _call("GET", url, {"accept": "application/json"}, None).json_object()


def _call(method: str, url: str, headers: dict[str, str], body: bytes | None) -> HttpAnswer:
    from gpuplex.http_client import call  # aiohttp: only for a call

    try:
        return call(
            method,
            url,
            headers=headers,
            body=body,
            timeout_s=TIMEOUT_S,
            max_bytes=MAX_ANSWER_BYTES,
            environment_proxy=True,  # a terminal behind its company's proxy, as curl would
        )
    except OSError as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, str(error)) from None


def refused(message: str) -> RequestRefused:
    return RequestRefused(ErrorCode.UNAUTHENTICATED, message)
