"""A control character (NUL above all: PostgreSQL refuses it in text) in a name or filter is the
caller's mistake: a 422 naming the field on both backends, never a 503 that invites retries."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine

from gpuplex.core.spec import RateLimits
from gpuplex.errors import StoreValueRefused
from gpuplex.store.keys import KeyRepository
from tests.integration.server.conftest import TENANT_A, Api, error_of


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "field"),
    [
        ("POST", f"/tenants/{TENANT_A}/keys", {"json": {"name": "ci\x00"}}, "name"),
        (
            "POST",
            "/tokens",
            {"json": {"name": "bot\x00", "role": "tenant-viewer", "tenant": TENANT_A}},
            "name",
        ),
        ("GET", "/audit", {"params": {"action": "key.create\x00"}}, "action"),
        ("POST", f"/tenants/{TENANT_A}/keys", {"json": {"name": "line\nbreak"}}, "name"),
    ],
)
def test_control_characters_are_a_422_naming_the_field(
    api: Api, method: str, path: str, kwargs: dict[str, object], field: str
) -> None:
    reply = api.call(method, path, **kwargs)  # type: ignore[arg-type]

    assert reply.status_code == 422, reply.text
    assert (error_of(reply)["code"], error_of(reply)["field"]) == ("invalid_request", field)


def test_a_value_the_store_refuses_is_an_input_error_where_the_database_refuses_it(
    engine: Engine,
) -> None:
    keys = KeyRepository(engine)
    now = datetime(2026, 3, 1, tzinfo=UTC)
    if engine.dialect.name != "postgresql":
        keys.create(TENANT_A, "nul\x00ok here", [], None, RateLimits(), now, "suite")
        return
    with pytest.raises(StoreValueRefused) as refused:
        keys.create(TENANT_A, "nul\x00", [], None, RateLimits(), now, "suite")
    assert refused.value.code.value == "store_value_refused"
    assert "NUL" in refused.value.message
