"""The device flow's polling (RFC 8628 3.5), against a token endpoint on loopback that answers as
providers do, rudely too: pending keeps waiting, `slow_down` adds 5 s to the interval, a refusal or
an expired code ends with an error saying so, and an answer that is no token answer (a proxy's HTML
page, an `expires_in` that is no number) is an error, never a traceback. The kept token is read back
only while it is valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.client.oidc.device_flow import DeviceCode, wait_for_token
from gpuplex.client.oidc.saved_login import Login, save, saved_token
from gpuplex.errors import ErrorCode, RequestRefused
from tests.clocks import ManualClock
from tests.unit.client.token_endpoint import TokenEndpoint

CODE = DeviceCode("dev-code", "ABCD-EFGH", "https://idp/device", None, 600, 5)
GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def poll(endpoint: TokenEndpoint) -> tuple[dict[str, Any], list[float]]:
    slept: list[float] = []
    clock = ManualClock(0.0)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    return wait_for_token(endpoint.url, "cli", CODE, sleep=sleep, clock=clock), slept


def test_pending_then_slow_down_then_the_token(endpoint: TokenEndpoint) -> None:
    endpoint.answer_json(400, {"error": "authorization_pending"})
    endpoint.answer_json(400, {"error": "slow_down"})
    endpoint.answer_json(200, {"access_token": "eyJ.x.y", "token_type": "Bearer", "expires_in": 60})
    got, slept = poll(endpoint)
    assert got["access_token"] == "eyJ.x.y"  # noqa: S105 - a made-up token
    assert slept == [5, 5, 10]
    assert (
        endpoint.forms == [{"grant_type": GRANT, "device_code": "dev-code", "client_id": "cli"}] * 3
    )  # a public client: its id in the form, no secret


@pytest.mark.parametrize(
    ("error", "says"),
    [("access_denied", "refused"), ("expired_token", "expired"), ("invalid_client", "invalid")],
)
def test_a_refusal_or_an_expired_code_ends_saying_so(
    endpoint: TokenEndpoint, error: str, says: str
) -> None:
    endpoint.answer_json(400, {"error": error})
    with pytest.raises(RequestRefused, match=says) as refused:
        poll(endpoint)
    assert refused.value.code is ErrorCode.UNAUTHENTICATED


def test_a_description_rfc_6749_does_not_allow_keeps_the_error_code(
    endpoint: TokenEndpoint,
) -> None:
    """A provider that words its pending answer with quotes and accents is still pending."""
    endpoint.answer_json(
        400, {"error": "authorization_pending", "error_description": 'wait for "José"'}
    )
    endpoint.answer_json(200, {"access_token": "eyJ.x.y", "token_type": "Bearer"})
    got, slept = poll(endpoint)
    assert got["access_token"] == "eyJ.x.y"  # noqa: S105 - a made-up token
    assert slept == [5, 5]


@pytest.mark.parametrize(
    ("answer", "code", "says"),
    [
        ((502, "text/html", b"<html>Bad Gateway</html>"), "identity_provider_unavailable", "502"),
        ((200, "text/html", b"<html>sign in</html>"), "unauthenticated", "not a token"),
        (
            (200, "application/json", b'{"access_token": "x", "expires_in": "soon"}'),
            "unauthenticated",
            "not a token",
        ),
        ((200, "application/json", b'{"token_type": "Bearer"}'), "unauthenticated", "no access"),
    ],
)
def test_an_answer_that_is_no_token_answer_is_an_error_that_says_so(
    endpoint: TokenEndpoint, answer: tuple[int, str, bytes], code: str, says: str
) -> None:
    endpoint.answers.append(answer)
    with pytest.raises(RequestRefused, match=says) as refused:
        poll(endpoint)
    assert refused.value.code.value == code


def test_a_code_nobody_uses_expires(endpoint: TokenEndpoint) -> None:
    for _ in range(200):
        endpoint.answer_json(400, {"error": "authorization_pending"})
    with pytest.raises(RequestRefused, match="expired"):
        poll(endpoint)


def test_the_kept_token_is_private_and_read_only_while_valid(tmp_path: Path) -> None:
    path = save(Login("https://idp", "eyJ.a.b", expires_at_s=1000.0), tmp_path / "x" / "login.json")
    assert path.stat().st_mode & 0o777 == 0o600
    assert saved_token(500.0, path) == "eyJ.a.b"
    assert saved_token(990.0, path) is None  # about to expire: not used
    assert saved_token(0.0, tmp_path / "missing.json") is None
