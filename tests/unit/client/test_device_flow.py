"""The device flow's polling (RFC 8628 3.5): pending keeps waiting, `slow_down` adds 5 s to the
interval, a refusal or an expired code ends with an error saying so; the kept token is read back
only while it is valid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplex.client.oidc import device_flow
from gpuplex.client.oidc.device_flow import DeviceCode, wait_for_token
from gpuplex.client.oidc.saved_login import Login, save, saved_token
from gpuplex.errors import ErrorCode, RequestRefused
from tests.clocks import ManualClock

CODE = DeviceCode("dev", "ABCD-EFGH", "https://idp/device", None, 600, 5)


def poll(
    answers: list[tuple[int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[float]]:
    slept: list[float] = []
    clock = ManualClock(0.0)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    monkeypatch.setattr(device_flow, "post_form", lambda url, form: answers.pop(0))
    got = wait_for_token("https://idp/token", "cli", CODE, sleep=sleep, clock=clock)
    return got, slept


def test_pending_then_slow_down_then_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[tuple[int, dict[str, Any]]] = [
        (400, {"error": "authorization_pending"}),
        (400, {"error": "slow_down"}),
        (200, {"access_token": "eyJ.x.y", "expires_in": 60}),
    ]
    got, slept = poll(answers, monkeypatch)
    assert got["access_token"] == "eyJ.x.y"  # noqa: S105 - a made-up token
    assert slept == [5, 5, 10]


@pytest.mark.parametrize(
    ("error", "says"),
    [("access_denied", "refused"), ("expired_token", "expired"), ("invalid_client", "400")],
)
def test_a_refusal_or_an_expired_code_ends_saying_so(
    monkeypatch: pytest.MonkeyPatch, error: str, says: str
) -> None:
    with pytest.raises(RequestRefused, match=says) as refused:
        poll([(400, {"error": error})], monkeypatch)
    assert refused.value.code is ErrorCode.UNAUTHENTICATED


def test_a_code_nobody_uses_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RequestRefused, match="expired"):
        poll([(400, {"error": "authorization_pending"})] * 200, monkeypatch)


def test_the_kept_token_is_private_and_read_only_while_valid(tmp_path: Path) -> None:
    path = save(Login("https://idp", "eyJ.a.b", expires_at_s=1000.0), tmp_path / "x" / "login.json")
    assert path.stat().st_mode & 0o777 == 0o600
    assert saved_token(500.0, path) == "eyJ.a.b"
    assert saved_token(990.0, path) is None  # about to expire: not used
    assert saved_token(0.0, tmp_path / "missing.json") is None
