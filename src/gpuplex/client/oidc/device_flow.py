"""Signing in on a terminal with the identity provider's device authorization grant (RFC 8628):
ask the provider for a code, show the person where to enter it, poll the token endpoint until they
have (or the code expires, or they refuse); Authlib sends the polls (gpuplex.oauth_client).
gpuplex.client.oidc.saved_login keeps the token for later commands; `gpuplex login`
(gpuplex.cli.login) shows the code and waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplex.client.oidc.provider import TIMEOUT_S, discovery, post_json, refused
from gpuplex.clock import SYSTEM_CLOCK, Clock, sleep_s
from gpuplex.errors import ErrorCode, RequestRefused

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"  # RFC 8628 3.4


@dataclass(frozen=True, slots=True)
class DeviceCode:
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in_s: float
    interval_s: float


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
    got = post_json(device_endpoint, form)
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
    clock: Clock = SYSTEM_CLOCK,
) -> dict[str, Any]:
    """Poll until the person has signed in: the token answer. Slows down when told to (RFC 8628
    3.5); refused, or expired, is an error that says so."""
    from gpuplex.oauth_client import ProviderRefusal, fetch_token, oauth_client  # for a call only

    deadline = clock.now_s() + code.expires_in_s
    interval = max(1.0, code.interval_s)
    client = oauth_client(client_id, timeout_s=TIMEOUT_S, environment_proxy=True)
    while clock.now_s() < deadline:
        sleep(interval)
        try:
            got = fetch_token(
                client, token_endpoint, grant_type=DEVICE_GRANT, device_code=code.device_code
            )
        except ProviderRefusal as said:
            if said.error == "authorization_pending":
                continue
            if said.error == "slow_down":
                interval += 5
                continue
            if said.error == "access_denied":
                raise refused("sign-in refused at the identity provider") from None
            if said.error == "expired_token":
                break
            raise refused(f"the identity provider refused the sign-in: {said}") from None
        except OSError as error:
            raise RequestRefused(ErrorCode.IDENTITY_PROVIDER_UNAVAILABLE, str(error)) from None
        except ValueError as error:
            raise refused(f"the identity provider's answer is not a token: {error}") from None
        if isinstance(got.get("access_token"), str):
            return got
        raise refused("the identity provider's answer holds no access token")
    raise refused("the code expired before anyone signed in with it: run `gpuplex login` again")
