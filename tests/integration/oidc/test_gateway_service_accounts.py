"""The gateway taking a tenant's service accounts' tokens from the real identity provider
(oidc-provider on loopback, the client credentials grant), with `auth.oidc.gateway` in the spec: a
service account of acme is served acme's models, with the official `openai` client, and its usage
is metered to acme under its identity; it cannot reach globex's model; tokens for another audience,
expired, forged, or whose tenant claim names no tenant (or is missing) are 401 `invalid_api_key`,
told nothing more than a bad key is; without the spec's `gateway:` section the provider's tokens
are refused, and taken again once it is back (the gateway follows its spec file); the tenant's rate
limit holds the service account and the tenant's API keys together."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from joserfc import jwt
from openai.types.chat import ChatCompletionMessageParam

from gpuplex.core.serve.service_accounts import account_prefix
from gpuplex.core.serve.usage import UsageRecord
from tests.e2e.gateway.stack import Gateway, Stack, stack_in
from tests.oidc.provider import AUDIENCE, OidcProvider, provider_or_skip, signing_key

SECRET = "gateway-service-account-secret-0123456789"  # noqa: S105 - test clients' secret
GATEWAY_AUDIENCE = "urn:gpuplex:gateway"
TENANT_CLAIM = "gpuplex_tenant"
#: client id -> the claims its access tokens carry besides the provider's own
ACCOUNTS: dict[str, dict[str, Any]] = {
    "svc-acme": {TENANT_CLAIM: "acme"},
    "svc-limited": {TENANT_CLAIM: "limited"},
    "svc-initech": {TENANT_CLAIM: "initech"},  # no such tenant
    "svc-unclaimed": {},
}
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello"}]

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: acme-chat, base_model: llama-8b, accepts_adapters: true, port: {sim_port}}
  - name: globex
    isolation: mps
    requirement: moderate
    workloads:
      - name: support
        serve: {model: support, lora_of: acme/chat}
  - name: limited
    isolation: mps
    requirement: moderate
    rate_limits: {requests_per_min: 2}
    workloads:
      - name: tiny
        serve: {model: tiny, lora_of: acme/chat}
gateway:
  port: {gateway_port}
  failed_auth_per_min: 10000
  health_interval_s: 0.5
auth:
  oidc:
    issuer: {issuer}
    client_id: gpuplex
    audience: "{audience}"
"""
GATEWAY_SECTION = f"""\
    gateway: {{tenant_claim: {TENANT_CLAIM}, audience: "{GATEWAY_AUDIENCE}"}}
"""


def client(client_id: str) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "client_secret": SECRET,
        "grant_types": ["client_credentials"],
        "redirect_uris": [],
        "response_types": [],
    }


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OidcProvider]:
    running = OidcProvider(
        tmp_path_factory.mktemp("provider"),
        [signing_key("k1")],
        [client(c) for c in ACCOUNTS],
        claims=ACCOUNTS,
        audiences=[GATEWAY_AUDIENCE],
    )
    running.start(provider_or_skip())
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with stack_in() as made:
        yield made


@pytest.fixture(scope="module")
def gateway(stack: Stack, provider: OidcProvider) -> Gateway:
    sim_port = stack.sim(["llama-8b"], ["globex/support", "limited/tiny"])
    spec = (
        SPEC.replace("{sim_port}", str(sim_port))
        .replace("{issuer}", provider.issuer)
        .replace("{audience}", AUDIENCE)
    )
    return stack.gateway(spec + GATEWAY_SECTION)


def token(provider: OidcProvider, client_id: str, resource: str = GATEWAY_AUDIENCE) -> str:
    return provider.client_token(client_id, SECRET, resource=resource)


@pytest.fixture
def connect(gateway: Gateway) -> Iterator[Callable[[str], openai.OpenAI]]:
    made: list[openai.OpenAI] = []

    def connected(credential: str) -> openai.OpenAI:
        made.append(
            openai.OpenAI(
                base_url=f"{gateway.url}/v1", api_key=credential, max_retries=0, timeout=10
            )
        )
        return made[-1]

    yield connected
    for one in made:
        one.close()


def chat(gateway: Gateway, credential: str, model: str = "acme-chat") -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {credential}"},
        json={"model": model, "messages": MESSAGES, "max_tokens": 3},
        timeout=10,
    )


def test_a_service_account_is_served_its_tenants_models_and_metered_to_it(
    stack: Stack,
    gateway: Gateway,
    provider: OidcProvider,
    connect: Callable[[str], openai.OpenAI],
) -> None:
    api = connect(token(provider, "svc-acme"))
    reply = api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=4)
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 4
    assert [m.id for m in api.models.list()] == ["acme-chat"]
    identity = account_prefix(provider.issuer, "svc-acme")

    def own() -> list[UsageRecord]:
        return [r for r in stack.usage().records(tenant="acme") if r.key_prefix == identity]

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not own():
        time.sleep(0.2)
    (record,) = own()
    assert (record.tenant, record.status, record.completion_tokens) == ("acme", 200, 4)
    assert not [r for r in stack.usage().records(tenant="globex") if r.key_prefix == identity]


def test_a_service_account_cannot_reach_another_tenants_model(
    gateway: Gateway, provider: OidcProvider
) -> None:
    refused = chat(gateway, token(provider, "svc-acme"), model="support")
    assert refused.status_code == 404, refused.text
    assert refused.json()["error"]["code"] == "model_not_found"


def refused_like_a_bad_key(reply: httpx.Response) -> None:
    assert reply.status_code == 401, reply.text
    assert reply.json()["error"] == {
        "message": "invalid API key",
        "type": "authentication_error",
        "param": None,
        "code": "invalid_api_key",
    }


def test_foreign_expired_forged_and_tenantless_tokens_are_refused_as_a_bad_key_is(
    gateway: Gateway, provider: OidcProvider
) -> None:
    now = int(time.time())
    claims = {
        "iss": provider.issuer,
        "aud": GATEWAY_AUDIENCE,
        "sub": "svc-acme",
        TENANT_CLAIM: "acme",
        "iat": now - 7200,
        "exp": now + 600,
    }
    header = {"alg": "RS256", "kid": "k1"}
    real_key = provider.keys[0]
    assert chat(gateway, jwt.encode(header, claims, real_key)).status_code == 200  # the control
    refused = {
        "for the control plane's audience": token(provider, "svc-acme", resource=AUDIENCE),
        "expired": jwt.encode(header, {**claims, "exp": now - 3600}, real_key),
        "forged": jwt.encode(header, claims, signing_key("k1")),  # same kid, another key
        "naming no tenant": token(provider, "svc-initech"),
        "without the tenant claim": token(provider, "svc-unclaimed"),
        "not a token": "a.b.c",
    }
    for why, credential in refused.items():
        reply = chat(gateway, credential)
        assert reply.status_code == 401, f"{why}: {reply.text}"
        refused_like_a_bad_key(reply)


def test_without_the_gateway_section_the_providers_tokens_are_refused(
    stack: Stack, gateway: Gateway, provider: OidcProvider
) -> None:
    credential = token(provider, "svc-acme")
    assert chat(gateway, credential).status_code == 200
    assert gateway.spec_path is not None
    with_section = gateway.spec_path.read_text()
    gateway.spec_path.write_text(with_section.replace(GATEWAY_SECTION, ""))
    try:
        reply = wait_for_status(gateway, credential, 401)
        refused_like_a_bad_key(reply)
    finally:
        gateway.spec_path.write_text(with_section)
    wait_for_status(gateway, credential, 200)  # taken again, the token as it was


def wait_for_status(gateway: Gateway, credential: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 10
    while True:
        reply = chat(gateway, credential)
        if reply.status_code == status or time.monotonic() > deadline:
            assert reply.status_code == status, reply.text
            return reply
        time.sleep(0.1)


def test_the_tenants_rate_limit_holds_its_service_accounts_and_keys_together(
    stack: Stack, gateway: Gateway, provider: OidcProvider
) -> None:
    key = stack.key("limited")
    credential = token(provider, "svc-limited")
    assert [chat(gateway, credential, model="tiny").status_code for _ in range(2)] == [200, 200]
    for who in (credential, key):  # requests_per_min: 2 for the tenant, whoever calls
        refused = chat(gateway, who, model="tiny")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
