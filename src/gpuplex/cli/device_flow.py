"""Signing in on a terminal with the identity provider's device authorization grant (RFC 8628):
ask the provider for a code, show the person where to enter it, poll the token endpoint until they
have (or the code expires, or they refuse), and keep the token for later commands.

The token is saved for this user only (`~/.config/gpuplex/login.json`, mode 600; $GPUPLEX_LOGIN_FILE
elsewhere) with its issuer and expiry; commands that call the control plane use it when neither
--token nor $GPUPLEX_TOKEN is given, until it expires.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplex.clock import now_s, sleep_s
from gpuplex.errors import ErrorCode, RequestRefused
from gpuplex.settings import login_file

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


@dataclass(frozen=True, slots=True)
class Login:
    issuer: str
    access_token: str
    expires_at_s: float


def endpoints(issuer: str) -> tuple[str, str]:
    """The provider's device authorization and token endpoints, from its discovery document."""
    found = _json("GET", issuer.rstrip("/") + "/.well-known/openid-configuration", None)
    if found.get("issuer") != issuer:
        raise _refused(f"{issuer}: its discovery document names issuer {found.get('issuer')!r}")
    device, token = found.get("device_authorization_endpoint"), found.get("token_endpoint")
    if not isinstance(device, str) or not isinstance(token, str):
        raise _refused(f"{issuer}: the provider offers no device authorization grant")
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
        raise _refused(f"{device_endpoint}: not a device authorization answer") from None


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
        status, got = _post_form(token_endpoint, form)
        if status == 200 and isinstance(got.get("access_token"), str):
            return got
        error = got.get("error")
        if error == "authorization_pending":
            continue
        if error == "slow_down":
            interval += 5
            continue
        if error == "access_denied":
            raise _refused("sign-in refused at the identity provider")
        if error == "expired_token":
            break
        raise _refused(f"the identity provider answered {status}: {error or got}")
    raise _refused("the code expired before anyone signed in with it: run `gpuplex login` again")


def save(login: Login, path: Path | None = None) -> Path:
    where = path or login_file()
    where.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(
            {
                "issuer": login.issuer,
                "access_token": login.access_token,
                "expires_at": login.expires_at_s,
            },
            out,
        )
    os.chmod(where, 0o600)
    return where


def saved_token(now_s: float, path: Path | None = None) -> str | None:
    """The saved login's token while it is valid; None when there is none, or it has expired."""
    try:
        data = json.loads((path or login_file()).read_text(encoding="utf-8"))
        token, expires = str(data["access_token"]), float(data["expires_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return token if expires > now_s + 30 else None


def _post_form(url: str, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
    body = urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(  # noqa: S310 - the provider's https (or loopback) URL
        url, data=body, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
            return reply.status, _parsed(reply.read(MAX_ANSWER_BYTES))
    except urllib.error.HTTPError as error:  # 400 carries the grant's error codes
        return error.code, _parsed(error.read(MAX_ANSWER_BYTES))
    except (urllib.error.URLError, OSError) as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, f"{url}: {error}") from None


def _json(method: str, url: str, form: dict[str, str] | None) -> dict[str, Any]:
    if form is not None:
        status, got = _post_form(url, form)
        if status != 200:
            raise _refused(f"{url} answered {status}: {got.get('error_description') or got}")
        return got
    request = urllib.request.Request(url, method=method)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:  # noqa: S310
            return _parsed(reply.read(MAX_ANSWER_BYTES))
    except (urllib.error.URLError, OSError) as error:
        raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, f"{url}: {error}") from None


def _parsed(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _refused(message: str) -> RequestRefused:
    return RequestRefused(ErrorCode.UNAUTHENTICATED, message)
