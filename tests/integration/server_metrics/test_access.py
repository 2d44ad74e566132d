"""/metrics names every tenant: it is served with the metrics token or a platform-admin token, and
without a token only to the networks the operator listed (none by default, not even loopback: tenant
workloads may share the host's network); it is not part of the REST API's schema."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from fastapi.testclient import TestClient

from gpuplex.observe.metrics_token import metrics_token_sha256
from gpuplex.server.app import create_app
from gpuplex.server.metrics.endpoint import parse_networks
from gpuplex.store.tokens import TokenRole
from tests.integration.server_metrics.conftest import NOW, Stack

OUTSIDE = "203.0.113.9"
METRICS_TOKEN = "gpm_the-operators-prometheus-0123"  # noqa: S105 - a test's own token


def server(
    stack: Stack, address: str, metrics_from: Sequence[str] = (), token: str | None = METRICS_TOKEN
) -> TestClient:
    """The control plane as `gpuplex server` builds it: no network listed unless given."""
    sha256 = metrics_token_sha256(token) if token is not None else None
    return TestClient(create_app(stack.ctx, metrics_from, sha256), client=(address, 50_000))


def token(stack: Stack, role: TokenRole, tenant: str | None = None) -> dict[str, str]:
    secret, _ = stack.ctx.tokens.create(
        name=f"{role} for the test", role=role, tenant=tenant, expires_at=None, now=NOW, actor="t"
    )
    return {"authorization": f"Bearer {secret}"}


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", OUTSIDE])
def test_by_default_no_address_reads_metrics_without_a_token(stack: Stack, address: str) -> None:
    reply = server(stack, address).get("/metrics")
    assert reply.status_code == 401
    error = reply.json()["error"]
    assert error["code"] == "unauthenticated"
    assert "GPUPLEX_METRICS_TOKEN" in error["message"]
    assert "northwind" not in reply.text


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", OUTSIDE])
def test_the_metrics_token_opens_it_from_anywhere(stack: Stack, address: str) -> None:
    headers = {"authorization": f"Bearer {METRICS_TOKEN}"}
    reply = server(stack, address).get("/metrics", headers=headers)
    assert reply.status_code == 200
    assert 'gpuplex_tenant_allocated_gpus{tenant="northwind"} 3.0' in reply.text


@pytest.mark.parametrize(
    "header",
    [f"Bearer {METRICS_TOKEN}x", f"Bearer {METRICS_TOKEN[:-1]}", f"Basic {METRICS_TOKEN}"],
)
def test_a_wrong_metrics_token_is_refused_even_from_a_listed_network(
    stack: Stack, header: str
) -> None:
    for client in (server(stack, OUTSIDE), server(stack, "127.0.0.1", ["127.0.0.0/8"])):
        reply = client.get("/metrics", headers={"authorization": header})
        assert reply.status_code == 401
        assert reply.json()["error"]["code"] == "unauthenticated"
        assert "northwind" not in reply.text


def test_without_a_configured_metrics_token_no_bearer_matches_it(stack: Stack) -> None:
    client = server(stack, "127.0.0.1", token=None)
    for header in (f"Bearer {METRICS_TOKEN}", "Bearer ", "Bearer x"):
        assert client.get("/metrics", headers={"authorization": header}).status_code == 401


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1"])
def test_listed_loopback_reads_metrics_without_a_token(stack: Stack, address: str) -> None:
    reply = stack.client(address, ["127.0.0.0/8", "::1/128"]).get("/metrics")
    assert reply.status_code == 200
    assert 'gpuplex_tenant_allocated_gpus{tenant="northwind"} 3.0' in reply.text


@pytest.mark.parametrize("address", [OUTSIDE, "10.0.0.5", "::ffff:8.8.8.8", "testclient"])
def test_anyone_else_without_a_token_is_refused(stack: Stack, address: str) -> None:
    reply = stack.client(address).get("/metrics")
    assert reply.status_code == 401
    error = reply.json()["error"]
    assert error["code"] == "unauthenticated"
    assert "platform-admin" in error["message"]
    assert "northwind" not in reply.text


def test_a_platform_admin_token_opens_it_from_anywhere(stack: Stack) -> None:
    reply = stack.client(OUTSIDE).get("/metrics", headers=token(stack, "platform-admin"))
    assert reply.status_code == 200
    assert "gpuplex_tenant_allocated_gpus" in reply.text


@pytest.mark.parametrize("role", ["tenant-admin", "tenant-viewer"])
def test_a_tenant_token_is_forbidden(stack: Stack, role: TokenRole) -> None:
    reply = stack.client(OUTSIDE).get("/metrics", headers=token(stack, role, "northwind"))
    assert reply.status_code == 403
    assert reply.json()["error"]["code"] == "forbidden"
    assert "contoso" not in reply.text


@pytest.mark.parametrize(
    "header", ["Bearer gpt_00000000_not-a-real-secret", "Basic dXNlcjpwYXNz", "Bearer ", "gpt_x"]
)
def test_a_bad_or_unknown_credential_is_refused(stack: Stack, header: str) -> None:
    reply = stack.client(OUTSIDE).get("/metrics", headers={"authorization": header})
    assert reply.status_code == 401
    assert reply.json()["error"]["code"] == "unauthenticated"


def test_a_revoked_token_is_refused(stack: Stack) -> None:
    secret, made = stack.ctx.tokens.create(
        name="ops", role="platform-admin", tenant=None, expires_at=None, now=NOW, actor="t"
    )
    headers = {"authorization": f"Bearer {secret}"}
    assert stack.client(OUTSIDE).get("/metrics", headers=headers).status_code == 200
    stack.ctx.tokens.revoke(made.prefix, NOW, "test")
    assert stack.client(OUTSIDE).get("/metrics", headers=headers).status_code == 401


def test_configured_networks_replace_loopback(stack: Stack) -> None:
    networks = ["10.0.0.0/8", "2001:db8::/32", "192.0.2.7"]
    assert stack.client("10.20.30.40", networks).get("/metrics").status_code == 200
    assert stack.client("2001:db8::1", networks).get("/metrics").status_code == 200
    assert stack.client("192.0.2.7", networks).get("/metrics").status_code == 200
    assert stack.client("192.0.2.8", networks).get("/metrics").status_code == 401
    assert stack.client("127.0.0.1", networks).get("/metrics").status_code == 401


def test_a_bad_network_is_named() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33' is not a network"):
        parse_networks(["127.0.0.0/8", "10.0.0.0/33"])


def test_metrics_is_outside_the_api_and_its_schema(stack: Stack) -> None:
    client = stack.client()
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert "/metrics" not in paths
    assert not any("metrics" in path for path in paths)
    assert client.get("/api/v1/metrics").status_code == 404
    assert client.post("/metrics").status_code == 405
