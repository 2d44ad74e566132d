"""The one reader of `Authorization: Bearer <token>` headers, used by the gateway, the control
plane's body guard and the metrics endpoints."""

from __future__ import annotations

import pytest

from gpuplex.core.serve.keys import bearer_token

TOKEN = "gpx_abcdefgh_" + "s" * 43


@pytest.mark.parametrize(
    ("header", "credentials"),
    [
        (f"Bearer {TOKEN}", TOKEN),
        (f"bearer  {TOKEN} ", TOKEN),  # RFC 7235: the scheme is case-insensitive
        (f"  BEARER {TOKEN}", TOKEN),
        (f"Bearer {TOKEN}".encode(), TOKEN),  # raw ASGI header bytes
        ("Bearer ", None),
        ("Bearer", None),
        (b"Bearer   ", None),
        (f"Basic {TOKEN}", None),
        (f"Bearerx {TOKEN}", None),
        (TOKEN, None),
        ("", None),
        (b"", None),
        (None, None),
    ],
)
def test_bearer_token(header: str | bytes | None, credentials: str | None) -> None:
    assert bearer_token(header) == credentials


def test_non_ascii_bytes_are_read_as_latin1_and_never_raise() -> None:
    assert bearer_token(b"Bearer \xff\xfe") == "\xff\xfe"
