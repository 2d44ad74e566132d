"""Credentials follow the person who made them, end to end: a service account of the real identity
provider (oidc-provider on loopback, the client credentials grant) that is tenant admin of alphaco
only through its group `gpu-alphaco-admins` makes a control-plane token and, with it, an API key
through the control plane's API; the real gateway (`gpuplex gateway`, a subprocess on the same
store) serves the key to the official `openai` client. Then:

- a platform admin applies a spec without the group's rule: the token is 401 `unauthenticated`
  (suspended, it says) on creating a key, the gateway refuses the key within
  SUSPENDED_WITHIN_S of the apply, and the audit log holds a `token.suspend` and a `key.suspend`
  entry naming them, their maker and the revision; with the rule applied again both resume, each
  audited, and the key is served again within the same time;
- the person's role lowered at the provider (admin -> viewer), seen on their next token: both
  are suspended the same way; back in the admins' group, both resume.

And a person who made a key in a dashboard session (a real `gpuplex server`, the browser's sign-in)
and is no longer in the admins' group at their next sign-in: the key is listed suspended, and
resumes at the sign-in after they are back, each audited.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gpuplex.store.audit import AuditLog
from gpuplex.store.db import open_store
from tests.e2e.gateway.stack import Gateway, Stack, stack_in
from tests.integration.oidc.test_api_with_provider import SECRET, auth_section, client
from tests.integration.oidc.test_dashboard_sign_in import Site, site
from tests.integration.server.conftest import TENANT_A, Api, error_of, make_api
from tests.oidc.provider import OidcProvider, provider_or_skip, signing_key

__all__ = ["site"]

#: What docs/identity.md promises: a suspended key stops being served within a second of the
#: change (the gateway's key refresh, every 0.5 s, and one store query).
SUSPENDED_WITHIN_S = 1.0
PERSON = "svc-alice"
ADMINS_RULE = '      - {group: "gpu-{tenant}-admins", role: tenant-admin}\n'
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]
SPEC = """\
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]
tenants:
  - name: alphaco
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: alphaco-chat, base_model: llama-8b, port: {sim_port}}
gateway:
  port: {gateway_port}
  health_interval_s: 0.5
"""


class Scene:
    """The control plane's API (the suite's platform-admin token as `admin`), the gateway, and
    the provider; the spec the gateway serves, with and without the admins' rule."""

    def __init__(self, api: Api, gateway: Gateway, provider: OidcProvider) -> None:
        self.api = api
        self.gateway = gateway
        self.provider = provider
        self.spec = gateway.spec_path.read_text() if gateway.spec_path else ""
        self.without_rule = self.spec.replace(ADMINS_RULE, "")
        assert self.without_rule != self.spec

    def person_signs_in(self) -> None:
        """A new token from the provider, with the groups it gives the person now."""
        self.api.tokens["person"] = self.provider.client_token(PERSON, SECRET)

    def served(self, key: str) -> int:
        return httpx.get(
            f"{self.gateway.url}/v1/models", headers={"authorization": f"Bearer {key}"}
        ).status_code

    def seconds_until_served_is(self, key: str, status: int, since: float) -> float:
        """How long after `since` the gateway first answered `key` with `status`; then every
        answer must be that (each worker has refreshed)."""
        deadline = since + 10
        while time.monotonic() < deadline:
            if self.served(key) == status:
                took = time.monotonic() - since
                assert [self.served(key) for _ in range(20)] == [status] * 20
                return took
            time.sleep(0.02)
        raise AssertionError(f"the gateway did not answer {status} within 10 s")

    def audit(self, action: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get("/audit", params={"action": action}).json()[
            "items"
        ]
        return items


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    groups = {PERSON: ["gpu-alphaco-admins"]}  # tenant admin only through this group
    provider = OidcProvider(tmp_path, [signing_key("k1")], [client(PERSON)], groups)
    provider.start(provider_or_skip())
    try:
        with stack_in() as stack:
            engine = open_store(stack.store_url)  # made before the gateway takes the folder
            api = make_api(engine, tmp_path, apply_spec=False)
            with api.client:
                gateway = start_gateway(stack, provider)
                made = Scene(api, gateway, provider)
                api.apply(made.spec)
                made.person_signs_in()
                yield made
            engine.dispose()
    finally:
        provider.stop()


def start_gateway(stack: Stack, provider: OidcProvider) -> Gateway:
    sim_port = stack.sim(["llama-8b"])
    spec = SPEC.replace("{sim_port}", str(sim_port)) + auth_section(provider.issuer)
    return stack.gateway(spec)


def person_makes_a_token_and_a_key(scene: Scene) -> tuple[str, str, str, str]:
    """Through the API: the person makes a tenant-admin token, and the token makes an API key
    that the gateway serves. (token, its prefix, key, its prefix)"""
    api = scene.api
    body = {"name": "ci", "role": "tenant-admin", "tenant": TENANT_A}
    made = api.post("/tokens", "person", json=body)
    assert made.status_code == 201, made.text
    api.tokens["persons-token"] = made.json()["token"]
    key = api.post(f"/tenants/{TENANT_A}/keys", "persons-token", json={"name": "app"})
    assert key.status_code == 201, key.text
    secret = key.json()["key"]
    assert scene.seconds_until_served_is(secret, 200, time.monotonic()) < 5
    with openai.OpenAI(
        base_url=f"{scene.gateway.url}/v1", api_key=secret, max_retries=0, timeout=10
    ) as served:
        reply = served.chat.completions.create(
            model="alphaco-chat", messages=MESSAGES, max_tokens=3
        )
    assert reply.usage is not None
    return made.json()["token"], made.json()["prefix"], secret, key.json()["prefix"]


def assert_refused_as_suspended(scene: Scene) -> None:
    refused = scene.api.post(f"/tenants/{TENANT_A}/keys", "persons-token", json={"name": "x"})
    assert refused.status_code == 401, refused.text
    error = error_of(refused)
    assert error["code"] == "unauthenticated"
    assert "suspended" in error["message"]


def test_removing_a_group_rule_stops_the_token_and_key_its_admin_made_with_audit_entries(
    scene: Scene,
) -> None:
    api = scene.api
    _, token_prefix, key, key_prefix = person_makes_a_token_and_a_key(scene)
    revision = api.apply(scene.without_rule)
    applied = time.monotonic()
    assert_refused_as_suspended(scene)
    assert scene.seconds_until_served_is(key, 401, applied) <= SUSPENDED_WITHIN_S
    person = f"oidc {PERSON} at {scene.provider.issuer}"
    for action, target in (
        ("token.suspend", f"token:{token_prefix}"),
        ("key.suspend", f"key:{key_prefix}"),
    ):
        (entry,) = scene.audit(action)
        assert entry["target"] == target
        assert entry["tenant"] == TENANT_A
        assert entry["actor"] == api.actor("admin")
        assert entry["detail"]["made_by"]["person"] == person
        assert entry["detail"]["cause"] == f"spec revision {revision} applied"
        assert "no longer holds" in entry["detail"]["reason"]
    listed = {t["prefix"]: t for t in api.get("/tokens").json()["items"]}
    assert listed[token_prefix]["state"] == "suspended"
    assert listed[token_prefix]["made_by"]["grant"]["groups"] == ["gpu-alphaco-admins"]
    # the rule back: both resume, audited, and the key is served again
    api.apply(scene.spec)
    again = time.monotonic()
    assert scene.seconds_until_served_is(key, 200, again) <= SUSPENDED_WITHIN_S
    more = api.post(f"/tenants/{TENANT_A}/keys", "persons-token", json={"name": "more"})
    assert more.status_code == 201, more.text
    assert [e["target"] for e in scene.audit("token.resume")] == [f"token:{token_prefix}"]
    assert [e["target"] for e in scene.audit("key.resume")] == [f"key:{key_prefix}"]


def test_a_role_lowered_at_the_provider_suspends_at_the_next_token_and_restored_resumes(
    scene: Scene,
) -> None:
    api, provider = scene.api, scene.provider
    _, token_prefix, key, key_prefix = person_makes_a_token_and_a_key(scene)
    provider.stop()  # the person moves from the admins' group to the viewers' at the provider
    provider.groups[PERSON] = ["gpu-alphaco-viewers"]
    provider.start(provider_or_skip())
    scene.person_signs_in()
    seen = time.monotonic()
    me = api.get("/whoami", "person").json()
    assert me["role"] == "tenant-viewer"
    assert_refused_as_suspended(scene)
    assert scene.seconds_until_served_is(key, 401, seen) <= SUSPENDED_WITHIN_S
    for action, target in (
        ("token.suspend", f"token:{token_prefix}"),
        ("key.suspend", f"key:{key_prefix}"),
    ):
        (entry,) = scene.audit(action)
        assert entry["target"] == target
        assert entry["actor"] == f"{PERSON} (oidc {PERSON} at {provider.issuer})"
        assert entry["detail"]["cause"] == "their groups as last seen changed"
    provider.stop()
    provider.groups[PERSON] = ["gpu-alphaco-admins"]
    provider.start(provider_or_skip())
    scene.person_signs_in()
    back = time.monotonic()
    assert api.get("/whoami", "person").json()["role"] == "tenant-admin"
    assert scene.seconds_until_served_is(key, 200, back) <= SUSPENDED_WITHIN_S
    assert [e["target"] for e in scene.audit("key.resume")] == [f"key:{key_prefix}"]


def test_a_group_gone_at_the_next_dashboard_sign_in_suspends_what_the_person_made(
    site: Site, tmp_path: Path
) -> None:
    keys = f"{site.url}/api/v1/tenants/{TENANT_A}/keys"

    @contextlib.contextmanager
    def sign_in_as_alice_in(groups: list[str]) -> Iterator[httpx.Client]:
        """Alice in `groups` at the provider (restarted with them), signed in anew."""
        site.provider.stop()
        site.provider.groups["alice"] = groups
        site.provider.start(provider_or_skip())
        with site.browser() as browser:
            assert site.sign_in(browser, "alice").status_code == 200
            yield browser

    with sign_in_as_alice_in(["gpu-alphaco-admins"]) as browser:
        csrf = browser.get(f"{site.url}/auth/session").json()["csrf_token"]
        made = browser.post(keys, json={"name": "ci"}, headers={"x-csrf-token": csrf})
        assert made.status_code == 201, made.text
        prefix = made.json()["prefix"]
    with sign_in_as_alice_in(["gpu-alphaco-viewers"]) as browser:
        (listed,) = browser.get(keys).json()["items"]  # a viewer reads the keys
        assert (listed["prefix"], listed["state"]) == (prefix, "suspended")
        assert listed["made_by"]["person"] == f"oidc alice at {site.provider.issuer}"
    with sign_in_as_alice_in(["gpu-alphaco-admins"]) as browser:
        (listed,) = browser.get(keys).json()["items"]
        assert listed["state"] == "active"
    engine = open_store(f"sqlite:///{tmp_path / 'server.db'}")
    try:
        entries = AuditLog(engine).entries()
    finally:
        engine.dispose()
    changes = [
        (e.action, e.target, e.detail.get("cause"))
        for e in entries
        if "sus" in e.action or "resume" in e.action
    ]
    cause = "their groups at a dashboard sign-in changed"
    assert changes == [
        ("key.suspend", f"key:{prefix}", cause),
        ("key.resume", f"key:{prefix}", cause),
    ]
