"""The control plane's answers for credentials that follow the person who made them, through its
API on SQLite and PostgreSQL, with people in dashboard sessions (as a sign-in makes them): the lists
show each credential's state and maker; a person's lowered role, seen on their next request,
suspends what they made; a suspended token is 401 `unauthenticated` saying so, before a body is
read too; a platform admin still revokes it; a spec without the rule suspends, and with it again
resumes, each audited."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpuplex.store.web_sessions import csrf_token_of
from tests.integration.oidc.test_api_with_provider import auth_section
from tests.integration.server.conftest import SPEC_YAML, TENANT_A, Api, error_of, make_api

ISSUER = "https://login.example.com/realms/acme"
WITH_AUTH = SPEC_YAML + auth_section(ISSUER)
WITHOUT_ADMINS_RULE = WITH_AUTH.replace(
    '      - {group: "gpu-{tenant}-admins", role: tenant-admin}\n', ""
)
PERSON = f"oidc alice at {ISSUER}"


@pytest.fixture
def api(engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    """The API with `auth.oidc` applied; callers named `session...` are dashboard sessions (the
    cookie and its CSRF token), the rest bearer tokens."""
    made = make_api(engine, tmp_path, apply_spec=False)
    bearer = made.headers

    def headers(caller: str | None) -> dict[str, str]:
        if caller is None or not caller.startswith("session"):
            return bearer(caller)
        cookie = made.tokens[caller]
        return {"cookie": f"gpuplex_session={cookie}", "x-csrf-token": csrf_token_of(cookie)}

    monkeypatch.setattr(made, "headers", headers)
    with made.client:
        made.apply(WITH_AUTH)
        yield made


def sign_in(api: Api, caller: str, groups: list[str]) -> None:
    """A dashboard session of alice in `groups`, used as `caller` (as a sign-in makes one)."""
    api.tokens[caller], _ = api.ctx.web_sessions.create(
        issuer=ISSUER,
        subject="alice",
        name="alice",
        groups=groups,
        now=api.clock.utc_now(),
        expires_at=api.clock.utc_now() + timedelta(hours=12),
    )


def alice_makes_a_token_and_a_key(api: Api) -> tuple[str, str]:
    sign_in(api, "session-admin", ["gpu-alphaco-admins"])
    body = {"name": "ci", "role": "tenant-admin", "tenant": TENANT_A}
    made = api.post("/tokens", "session-admin", json=body)
    assert made.status_code == 201, made.text
    api.tokens["alices-token"] = made.json()["token"]
    key = api.post(f"/tenants/{TENANT_A}/keys", "alices-token", json={"name": "app"})
    assert key.status_code == 201, key.text
    return made.json()["prefix"], key.json()["prefix"]


def states(api: Api) -> dict[str, str]:
    """The state of each credential a person made, as the platform admin's lists show them."""
    tokens = api.get("/tokens").json()["items"]
    keys = api.get(f"/tenants/{TENANT_A}/keys").json()["items"]
    return {item["prefix"]: item["state"] for item in tokens + keys if item["made_by"]}


def test_the_lists_show_each_credentials_maker_and_state(api: Api) -> None:
    token_prefix, key_prefix = alice_makes_a_token_and_a_key(api)
    tokens = {t["prefix"]: t for t in api.get("/tokens").json()["items"]}
    assert tokens[token_prefix]["state"] == "active"
    assert tokens[token_prefix]["made_by"] == {
        "token": None,
        "person": PERSON,
        "grant": {"role": "tenant-admin", "tenant": TENANT_A, "groups": ["gpu-alphaco-admins"]},
    }
    suite_token = next(t for t in tokens.values() if t["name"] == "admin-token")
    assert suite_token["made_by"] is None  # made in the store, by no person and no token
    (key,) = api.get(f"/tenants/{TENANT_A}/keys").json()["items"]
    assert key["prefix"] == key_prefix
    assert key["made_by"]["token"] == token_prefix  # made by alice's token: follows alice
    assert key["made_by"]["person"] == PERSON
    assert (key["state"], key["suspended_at"]) == ("active", None)


def test_a_lowered_role_seen_on_the_next_request_suspends_and_the_token_is_told(
    api: Api,
) -> None:
    token_prefix, key_prefix = alice_makes_a_token_and_a_key(api)
    sign_in(api, "session-viewer", ["gpu-alphaco-viewers"])  # signed in again: now a viewer
    me = api.get("/whoami", "session-viewer").json()
    assert me["role"] == "tenant-viewer"
    assert states(api) == {token_prefix: "suspended", key_prefix: "suspended"}
    # the old session acts on the groups seen last: a viewer now, it makes nothing
    old = api.post(f"/tenants/{TENANT_A}/keys", "session-admin", json={"name": "again"})
    assert old.status_code == 403, old.text
    for refused in (
        api.get("/whoami", "alices-token"),
        api.post(f"/tenants/{TENANT_A}/keys", "alices-token", json={"name": "more"}),
    ):
        assert refused.status_code == 401, refused.text
        error = error_of(refused)
        assert error["code"] == "unauthenticated"
        assert "suspended" in error["message"]
        assert "bravoco" not in refused.text
    entries = api.get("/audit", params={"action": "token.suspend"}).json()["items"]
    assert [e["target"] for e in entries] == [f"token:{token_prefix}"]
    assert entries[0]["actor"] == f"alice ({PERSON})"
    assert entries[0]["detail"]["made_by"]["person"] == PERSON
    # a platform admin still revokes it
    revoked = api.delete(f"/tokens/{token_prefix}")
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["state"] == "revoked"


def test_a_spec_without_the_rule_suspends_and_with_it_again_resumes(api: Api) -> None:
    token_prefix, key_prefix = alice_makes_a_token_and_a_key(api)
    revision = api.apply(WITHOUT_ADMINS_RULE)
    assert states(api) == {token_prefix: "suspended", key_prefix: "suspended"}
    assert api.get("/whoami", "alices-token").status_code == 401
    suspended = api.get("/audit", params={"tenant": TENANT_A}).json()["items"]
    by_action = {(e["action"], e["target"]): e for e in suspended}
    for action, target in (("token.suspend", token_prefix), ("key.suspend", key_prefix)):
        entry = by_action[(action, f"{action.split('.')[0]}:{target}")]
        assert entry["detail"]["cause"] == f"spec revision {revision} applied"
        assert entry["actor"] == api.actor("admin")
    api.apply(WITH_AUTH)
    assert states(api) == {token_prefix: "active", key_prefix: "active"}
    assert api.get("/whoami", "alices-token").status_code == 200
    actions = [e["action"] for e in api.get("/audit", params={"tenant": TENANT_A}).json()["items"]]
    assert "token.resume" in actions
    assert "key.resume" in actions
