"""Times at the ends of Python's datetime range (year 1 or 9999, with an offset) overflow when
turned into UTC or moved by a window: every time the API takes is a 422 naming its field there,
never a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.server.conftest import TENANT_A, Api, error_of

LATE = "9999-12-31T23:59:59-05:00"  # past datetime.max once in UTC
EARLY = "0001-01-01T00:00:00+14:00"  # before datetime.min once in UTC
DAY = "2026-03-01T00:00:00Z"

CASES: list[tuple[str, str, dict[str, Any], str]] = [
    ("POST", f"/tenants/{TENANT_A}/keys", {"json": {"expires_at": LATE}}, "expires_at"),
    (
        "POST",
        "/tokens",
        {"json": {"name": "t", "role": "platform-admin", "expires_at": LATE}},
        "expires_at",
    ),
    ("GET", f"/tenants/{TENANT_A}/usage", {"params": {"start": EARLY, "end": DAY}}, "start"),
    ("GET", "/usage", {"params": {"start": "9999-12-30T00:00:00Z", "end": LATE}}, "start"),
    ("GET", f"/tenants/{TENANT_A}/latency", {"params": {"start": EARLY, "end": DAY}}, "start"),
    ("GET", f"/tenants/{TENANT_A}/latency", {"params": {"end": LATE}}, "end"),
    ("POST", "/meter/rollup", {"json": {"start": EARLY, "end": DAY}}, "start"),
    (
        "POST",
        "/meter/rollup",
        {"json": {"start": "0001-01-01T00:00:00Z", "end": "0001-01-01T10:00:00Z"}},
        "start",
    ),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "field"), CASES)
def test_times_at_the_ends_of_the_range_are_a_422(
    api: Api, method: str, path: str, kwargs: dict[str, Any], field: str
) -> None:
    reply = api.call(method, path, **kwargs)
    assert reply.status_code == 422, reply.text
    assert error_of(reply)["field"] == field


def test_an_ordinary_far_expiry_is_still_accepted(api: Api) -> None:
    reply = api.post(f"/tenants/{TENANT_A}/keys", json={"expires_at": "8999-12-31T00:00:00Z"})
    assert reply.status_code == 201, reply.text
