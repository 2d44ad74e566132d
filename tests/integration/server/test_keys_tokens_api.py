"""Gateway keys and control-plane tokens over the API: a secret is in the create reply only, the
stored key authenticates the way the gateway checks it, revoking works, and a revoked token is 401.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuplex.core.serve.keys import key_matches
from gpuplex.core.spec import RateLimits
from tests.integration.server.conftest import TENANT_A, TENANT_B, Api, error_of


def test_a_created_key_is_shown_once_and_authenticates_against_the_active_records(
    api: Api,
) -> None:
    reply = api.post(
        f"/tenants/{TENANT_A}/keys",
        "a-admin",
        json={"name": "ci", "models": ["alphaco-chat"], "requests_per_min": 60},
    )
    assert reply.status_code == 201, reply.text
    created = reply.json()
    secret = created["key"]
    assert created["prefix"] in secret
    assert (created["tenant"], created["name"], created["state"]) == (TENANT_A, "ci", "active")

    listed = api.get(f"/tenants/{TENANT_A}/keys", "a-viewer")
    assert listed.status_code == 200
    assert [k["prefix"] for k in listed.json()["items"]] == [created["prefix"]]
    assert secret not in listed.text
    assert secret.split("_", 2)[2] not in listed.text
    assert "key" not in listed.json()["items"][0]

    records = api.ctx.keys.active_records(api.clock.utc_now())
    [record] = [r for r in records if r.key.prefix == created["prefix"]]
    assert record.key.tenant == TENANT_A
    assert key_matches(record.key_hash, secret)
    assert not key_matches(record.key_hash, secret[:-1] + ("x" if secret[-1] != "x" else "y"))


def test_a_keys_own_limits_reach_the_store_as_given(api: Api) -> None:
    limits = {"requests_per_min": 60, "tokens_per_min": 10**12, "concurrent_requests": 3}
    reply = api.post(f"/tenants/{TENANT_A}/keys", "a-admin", json={"name": "ci", **limits})
    assert reply.status_code == 201, reply.text
    [key] = api.ctx.keys.list(TENANT_A)
    assert key.limits == RateLimits.model_validate(limits)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requests_per_min", 0),
        ("tokens_per_min", 10**12 + 1),
        ("concurrent_requests", True),
        ("requests_per_min", "60"),
        ("tokens_per_min", 1.5),
    ],
)
def test_a_limit_rate_limits_refuses_is_422_naming_it(api: Api, field: str, value: object) -> None:
    reply = api.post(f"/tenants/{TENANT_A}/keys", "a-admin", json={field: value})
    assert reply.status_code == 422, reply.text
    assert error_of(reply)["field"] == field
    assert api.ctx.keys.list(TENANT_A) == []


def test_a_key_for_a_model_the_tenant_does_not_serve_is_422_naming_models(api: Api) -> None:
    reply = api.post(f"/tenants/{TENANT_A}/keys", json={"models": ["bravoco-embed"]})
    assert reply.status_code == 422
    error = error_of(reply)
    assert (error["code"], error["field"]) == ("invalid_request", "models")
    assert api.ctx.keys.list(TENANT_A) == []


def test_a_past_or_naive_expiry_is_422(api: Api) -> None:
    past = (api.clock.utc_now() - timedelta(days=1)).isoformat()
    naive = "2030-01-01T00:00:00"
    for expires_at in (past, naive):
        reply = api.post(f"/tenants/{TENANT_A}/keys", json={"expires_at": expires_at})
        assert reply.status_code == 422, reply.text
        assert error_of(reply)["field"] == "expires_at"


def test_a_revoked_key_is_no_longer_active(api: Api) -> None:
    created = api.post(f"/tenants/{TENANT_A}/keys", "a-admin", json={}).json()
    reply = api.delete(f"/tenants/{TENANT_A}/keys/{created['prefix']}", "a-admin")
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == "revoked"
    assert all(
        r.key.prefix != created["prefix"] for r in api.ctx.keys.active_records(api.clock.utc_now())
    )
    listed = api.get(f"/tenants/{TENANT_A}/keys").json()["items"]
    assert [k["state"] for k in listed] == ["revoked"]
    missing = api.delete(f"/tenants/{TENANT_A}/keys/00000000")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "not_found"


def test_a_key_of_another_tenant_cannot_be_revoked_through_this_tenant(api: Api) -> None:
    created = api.post(f"/tenants/{TENANT_B}/keys", json={}).json()
    reply = api.delete(f"/tenants/{TENANT_A}/keys/{created['prefix']}")
    assert reply.status_code == 404
    assert [r.key.prefix for r in api.ctx.keys.active_records(api.clock.utc_now())] == [
        created["prefix"]
    ]


def test_tokens_create_list_and_revoke_and_a_revoked_token_is_401(api: Api) -> None:
    reply = api.post(
        "/tokens", "a-admin", json={"name": "alpha-ci", "role": "tenant-viewer", "tenant": TENANT_A}
    )
    assert reply.status_code == 201, reply.text
    created = reply.json()
    token = created["token"]
    assert token.startswith(f"gpt_{created['prefix']}_")
    assert (created["role"], created["tenant"], created["created_by"]) == (
        "tenant-viewer",
        TENANT_A,
        api.actor("a-admin"),
    )
    whoami = api.client.get("/api/v1/whoami", headers={"authorization": f"Bearer {token}"})
    assert whoami.json() == {"name": "alpha-ci", "role": "tenant-viewer", "tenant": TENANT_A}

    listed = api.get("/tokens", "a-admin")
    assert token not in listed.text
    names = [t["name"] for t in listed.json()["items"]]
    assert names == ["a-admin-token", "a-viewer-token", "alpha-ci"]
    every = [t["name"] for t in api.get("/tokens").json()["items"]]
    assert len(every) == 6

    revoked = api.delete(f"/tokens/{created['prefix']}", "a-admin")
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    after = api.client.get("/api/v1/whoami", headers={"authorization": f"Bearer {token}"})
    assert after.status_code == 401
    assert error_of(after)["code"] == "unauthenticated"
    assert after.headers["www-authenticate"] == "Bearer"


def test_token_grants_never_exceed_the_granter(api: Api) -> None:
    cases = [
        ("a-admin", {"name": "x", "role": "platform-admin"}, 403),
        ("a-admin", {"name": "x", "role": "tenant-admin", "tenant": TENANT_B}, 404),
        ("a-viewer", {"name": "x", "role": "tenant-viewer", "tenant": TENANT_A}, 403),
        ("admin", {"name": "x", "role": "platform-admin", "tenant": TENANT_A}, 422),
        ("admin", {"name": "x", "role": "tenant-admin"}, 422),
        ("admin", {"name": "x", "role": "tenant-admin", "tenant": "nosuchco"}, 404),
        ("admin", {"name": "x", "role": "owner"}, 422),
    ]
    for caller, body, status in cases:
        reply = api.post("/tokens", caller, json=body)
        assert reply.status_code == status, (caller, body, reply.text)
        error_of(reply)
    assert len(api.ctx.tokens.list()) == 5


def test_an_unknown_or_garbled_token_is_401(api: Api) -> None:
    good = api.tokens["admin"]
    for header in (
        None,
        b"Bearer ",
        b"Basic dXNlcjpwYXNz",
        f"Bearer {good[:-2]}".encode(),
        f"Bearer {good}x".encode(),
        b"Bearer gpt_zz",
        "Bearer \u00e9t\u00e9".encode("latin-1"),
    ):
        headers = [] if header is None else [(b"authorization", header)]
        reply = api.client.get("/api/v1/tenants", headers=headers)
        assert reply.status_code == 401, (header, reply.text)
        assert error_of(reply)["code"] == "unauthenticated"


def test_a_token_named_like_anothers_cannot_pass_for_it_in_the_audit_log(api: Api) -> None:
    copycat = api.post(
        "/tokens",
        "a-admin",
        json={"name": "admin-token", "role": "tenant-admin", "tenant": TENANT_A},
    ).json()
    api.tokens["copycat"] = copycat["token"]

    assert api.post(f"/tenants/{TENANT_A}/keys", "copycat", json={}).status_code == 201

    [entry] = api.get("/audit", params={"action": "key.create"}).json()["items"]
    assert entry["actor"] == f"admin-token (token {copycat['prefix']})"
    assert entry["actor"] != api.actor("admin")
