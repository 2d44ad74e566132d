"""Signing in on a terminal with the identity provider's device authorization grant (RFC 8628):
ask the provider for a code, show the person where to enter it, poll the token endpoint until they
have (or the code expires, or they refuse). gpuplex.cli.saved_login keeps the token for later
commands. The HTTP helpers here serve the client credentials grant too (cli/client_credentials.py).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplex.clock import now_s, sleep_s
from gpuplex.errors import ErrorCode, RequestRefused

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in_s: float
    interval_s: float


def discovery(issuer: str) -> dict[str, Any]:
    """The provider's discovery document, which must name the issuer exactly."""
    found = _json("GET", issuer.rstrip("/") + "/.well-known/openid-configuration", None)
    if found.get("issuer") != issuer:
        raise refused(f"{issuer}: its discovery document names issuer {found.get('issuer')!r}")
    return found


def endpoints(issuer: str) -> tuple[str, str]:
    """The provider's device authorization and token endpoints, from its discovery document."""
    found = discovery(issuer)
    device, token = found.get("device_authorization_endpoint"), found.get("token_endpoint")
    if not isinstance(device, str) or not isinstance(token, str):
        raise refused(f"{issuer}: the provider offers no device authorization grant")
    return device, token


def start(
    device_endpoint: str, client_id: str, scopes: list[str], audience: str | None
) -> DeviceCode:
    form = {"client_id": client_id, "scope": " ".join(scopes)}
    if audience:
        form["resource"] = audience  # RFC 8707, for providers that issue JWTs per resource
    got = _json("POST", device_endpoint, form)
    try:
        return DeviceCode(
            device_code=str(got["device_code"]),
            user_code=str(got["user_code"]),
            verification_uri=str(got["verification_uri"]),
            verification_uri_complete=got.get("verification_uri_complete"),
            expires_in_s=float(got.get("expires_in", 600)),
            interval_s=float(got.get("interval", 5)),
        )
    except (KeyError, TypeError, ValueError):
        raise refused(f"{device_endpoint}: not a device authorization answer") from None


def wait_for_token(
    token_endpoint: str,
    client_id: str,
    code: DeviceCode,
    *,
    sleep: Callable[[float], None] = sleep_s,
    clock: Callable[[], float] = now_s,
) -> dict[str, Any]:
    """Poll until the person has signed in: the token answer. Slows down when told to (RFC 8628
    3.5); refused, or expired, is an error that says so."""
    deadline = clock() + code.expires_in_s
    interval = max(1.0, code.interval_s)
    form = {"grant_type": DEVICE_GRANT, "device_code": code.device_code, "client_id": client_id}
    while clock() < deadline:
        sleep(interval)
        status, got = post_form(token_endpoint, form)
        if status == 200 and isinstance(got.get("access_token"), str):
            return got
        error = got.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5
            continue
        if error == "access_denied":
            raise refused("sign-in refused at the identity provider")
        if error == "expired_token":
            break
        raise refused(f"the identity provider answered {status}: {error or got}")
    raise refused("the code expired before anyone signed in with it: run `gpuplex login` again")


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


def _json(method: str, url: str, form: dict[str, str] | None) -> dict[str, Any]:
    from urllib.error import URLError  # urllib.request loads http.client, ssl
    from urllib.request import Request, urlopen  # and email: only for a call

    if form is not None:
        status, got = post_form(url, form)
        if status != 200:
            raise refused(f"{url} answered {status}: {got.get('error_description') or got}")
        return got
    request = Request(url, method=method)  # noqa: S310
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
