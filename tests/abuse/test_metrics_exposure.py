"""A tenant workload on the gateway's host (host network, so its requests come from loopback) tries
to read the gateway's /metrics, which names every tenant with its models and usage. Against a real
`gpuplex gateway` process: without the operator's metrics token nothing is served (not even a
stream's latency, labelled with its model), whatever the caller sends; with it, Prometheus reads
everything; the token never shows in the log."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.gateway.stack import METRICS_TOKEN, Gateway, Stack, stack_in

pytestmark = pytest.mark.lane

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]
tenants:
  - name: acme-secret-customer
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: acme-confidential-model, base_model: llama-8b, port: {sim_port}}
gateway:
  port: {gateway_port}
  health_interval_s: 0.5
"""


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """One stack for the module: its model servers and gateway start once, and each test makes
    its own keys (starting them per test cost most of this module's time)."""
    with stack_in() as made:
        yield made


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Gateway:
    return stack.gateway(SPEC.replace("{sim_port}", str(stack.sim(["llama-8b"]))))


def metrics(gateway: Gateway, **headers: str) -> httpx.Response:
    return httpx.get(f"{gateway.url}/metrics", headers=headers, timeout=10)


def test_a_tenant_on_the_host_network_cannot_read_metrics(stack: Stack, gateway: Gateway) -> None:
    key = stack.key("acme-secret-customer")
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "acme-confidential-model", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert reply.status_code == 200
    streamed = httpx.post(  # a stream's time to first token is labelled with its model
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={
            "model": "acme-confidential-model",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
        },
        timeout=10,
    )
    assert streamed.status_code == 200
    stealable = gateway.metrics()  # what there is to steal
    assert "acme-secret-customer" in stealable
    assert 'model="acme-confidential-model"' in stealable

    attempts: list[dict[str, str]] = [
        {},  # plain loopback: what used to be enough
        {"authorization": f"Bearer {key}"},  # the tenant's own API key
        {"authorization": f"Bearer {METRICS_TOKEN[:-1]}"},  # a near miss
        {"authorization": f"Basic {METRICS_TOKEN}"},
        {"authorization": "Bearer"},
        {"x-forwarded-for": "10.0.0.1", "x-real-ip": "10.0.0.1"},  # headers claim nothing
    ]
    for headers in attempts:
        reply = metrics(gateway, **headers)
        assert reply.status_code == 401, headers
        assert reply.headers["content-type"] == "application/json"
        error = orjson.loads(reply.content)["error"]
        assert error["code"] == "metrics_token_required"
        assert "acme" not in reply.text
        assert "gpuplex_gateway" not in reply.text


def test_a_raw_request_from_loopback_gets_nothing_either(gateway: Gateway) -> None:
    """No client library in the way: HTTP/1.0, an absolute URL, odd casing of the header name."""
    requests = [
        b"GET /metrics HTTP/1.0\r\n\r\n",
        b"GET http://127.0.0.1/metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAUTHORIZATION: bearer\r\nConnection: close\r\n\r\n",
    ]
    for raw in requests:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as sock:
            sock.sendall(raw)
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status_line = answer.split(b"\r\n", 1)[0]
        assert b" 200 " not in status_line, raw
        assert b"acme" not in answer


def test_prometheus_with_the_token_reads_it_and_the_token_is_never_logged(
    stack: Stack, gateway: Gateway
) -> None:
    reply = metrics(gateway, authorization=f"Bearer {METRICS_TOKEN}")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "gpuplex_gateway_requests_total" in reply.text
    metrics(gateway, authorization=f"Bearer {METRICS_TOKEN}x")  # a refusal is not logged with it
    gateway.stop()
    assert METRICS_TOKEN not in gateway.log()
    for path in [p for p in Path(stack.tmp).rglob("*") if p.is_file()]:  # log, spool, store
        assert METRICS_TOKEN.encode() not in path.read_bytes(), path
