"""A request body with a field the API does not know is refused, naming the field and the closest
known one, and changes nothing: a typo must not quietly mean "every model, no limit" or "never
expires". Every body the API reads is held to it, as its published schema says."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.server.conftest import API, TENANT_A, Api, error_of


@pytest.mark.parametrize(
    ("body", "field", "hint"),
    [
        ({"modles": ["alphaco-chat"], "requests_per_minute": 5}, "modles", '"models"'),
        (
            {"models": ["alphaco-chat"], "requests_per_minute": 5},
            "requests_per_minute",
            '"requests_per_min"',
        ),
        ({"expires_in": "1d"}, "expires_in", '"expires_at"'),
    ],
)
def test_a_key_with_an_unknown_field_is_422_naming_it_and_no_key_is_made(
    api: Api, body: dict[str, Any], field: str, hint: str
) -> None:
    reply = api.post(f"/tenants/{TENANT_A}/keys", "a-admin", json=body)
    assert reply.status_code == 422, reply.text
    error = error_of(reply)
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert error["message"].startswith(
        f"{field}: not a field of this request (did you mean {hint}?)"
    )
    assert "requests_per_min, tokens_per_min" in error["message"]  # the fields there are
    assert api.ctx.keys.list(TENANT_A) == []


def body_operations(api: Api) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, body schema) of every operation that reads a JSON body."""
    schema = api.client.get(f"{API}/openapi.json").json()
    components = schema["components"]["schemas"]
    found = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                body = content["application/json"]["schema"]
                body = components[body["$ref"].rsplit("/", 1)[1]] if "$ref" in body else body
                found.append((method.upper(), path, body))
    return found


def test_every_body_refuses_unknown_fields_and_says_so_in_its_schema(api: Api) -> None:
    operations = body_operations(api)
    assert len(operations) >= 5  # keys, tokens, budgets, spec preview and apply, rollups
    for method, path, body in operations:
        assert body.get("additionalProperties") is False, (method, path)
        url = path.replace("{tenant}", TENANT_A).replace("{name}", TENANT_A)
        reply = api.call(method, url, "admin", json={"zz_not_a_field": 1})
        assert reply.status_code == 422, (method, path, reply.text)
        assert error_of(reply)["field"] == "zz_not_a_field", (method, path, reply.text)
