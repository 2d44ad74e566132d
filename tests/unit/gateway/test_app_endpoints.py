"""The gateway's own endpoints, on the ASGI app with a stand-in runtime: `/healthz` names what stops
it from serving and billing a request, and counts the model servers that are ready, starting and
down (never naming them: anyone may ask); `/metrics` (every tenant's names, models and usage) needs
the metrics token, or a caller from a network the operator listed, and answers anyone else 401
with an OpenAI-style JSON error; `/health` stays a plain liveness answer."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from gpuplex.gateway.app import GatewayApp
from gpuplex.gateway.backends import BackendState
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.observe.metrics_token import metrics_token_sha256
from gpuplex.settings import GatewaySettings

TOKEN = "gpm_prometheus-reads-this-0123456789"  # noqa: S105 - a test's own token
LOOPBACK = ("127.0.0.1", "::1")


@dataclass
class FakeSpool:
    cause: str | None = None

    def ready(self) -> str | None:
        return self.cause


@dataclass
class FakePool:
    now: BackendState

    def state(self) -> BackendState:
        return self.now


@dataclass
class FakeLive:
    metrics_networks: tuple[Any, ...] = ()
    pools: dict[str, FakePool] = field(default_factory=dict)


@dataclass
class FakeRuntime:
    settings: GatewaySettings
    spool: FakeSpool = field(default_factory=FakeSpool)
    live: FakeLive = field(default_factory=FakeLive)


def gateway(
    token: str | None = TOKEN, metrics_from: tuple[str, ...] = ()
) -> tuple[GatewayApp, FakeRuntime]:
    settings = GatewaySettings(
        spec_path=Path("unused.yaml"),
        store_url="sqlite://",
        spool_dir=Path("unused"),
        metrics_token_sha256=metrics_token_sha256(token) if token else None,
    )
    app = GatewayApp(settings)
    runtime = FakeRuntime(settings, live=FakeLive(tuple(map(ipaddress.ip_network, metrics_from))))
    app.runtime = cast(GatewayRuntime, runtime)
    return app, runtime


def get(
    app: GatewayApp, path: str, client: str = "127.0.0.1", authorization: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = [(b"authorization", authorization.encode())] if authorization is not None else []
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": headers,
        "client": (client, 40_000),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    asyncio.run(app(scope, receive, send))
    start = sent[0]
    response_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], response_headers, b"".join(m.get("body", b"") for m in sent[1:])


def counted(total: int, ready: int, starting: int = 0, down: int = 0) -> dict[str, int]:
    return {"total": total, "ready": ready, "starting": starting, "down": down}


def test_healthz_is_ok_while_the_spool_takes_records_and_every_backend_is_ready() -> None:
    app, runtime = gateway()
    status, headers, body = get(app, "/healthz")
    assert (status, orjson.loads(body)) == (200, {"status": "ok", "backends": counted(0, 0)})
    assert headers["content-type"] == "application/json"
    runtime.live.pools = {"acme/chat": FakePool(BackendState.READY)}
    status, _, body = get(app, "/healthz")
    assert (status, orjson.loads(body)) == (200, {"status": "ok", "backends": counted(1, 1)})


def test_healthz_says_when_model_servers_are_not_ready_without_naming_them() -> None:
    """Its only backend down, every request 503: `/healthz` no longer says ok. The gateway
    itself can still serve (another tenant's model, a retry once it is back), so 200."""
    app, runtime = gateway()
    runtime.live.pools = {
        "acme/chat": FakePool(BackendState.DOWN),
        "bolt/chat": FakePool(BackendState.STARTING),
        "cora/chat": FakePool(BackendState.READY),
    }
    status, _, body = get(app, "/healthz")
    assert status == 200
    assert orjson.loads(body) == {
        "status": "degraded",
        "backends": counted(3, 1, starting=1, down=1),
        "problems": [
            "2 of 3 model servers have no replica that answers its health check (1 starting, "
            "1 down): requests to their models get 503 until one does"
        ],
    }
    assert b"acme" not in body
    assert b"bolt" not in body


def test_healthz_names_the_spool_problem_and_health_stays_ok() -> None:
    app, runtime = gateway()
    runtime.spool.cause = "the usage spool /var/spool is full (ENOSPC): 0 KiB free"
    status, _, body = get(app, "/healthz")
    assert status == 503
    assert orjson.loads(body) == {
        "status": "degraded",
        "backends": counted(0, 0),
        "problems": [runtime.spool.cause],
    }
    status, _, body = get(app, "/health")  # liveness: `gpuplex up` and restarts must not fire
    assert (status, orjson.loads(body)) == (200, {"status": "ok"})


@pytest.mark.parametrize("client", [*LOOPBACK, "10.1.2.3"])
def test_metrics_without_a_token_is_refused_even_to_loopback(client: str) -> None:
    app, _ = gateway()
    status, headers, body = get(app, "/metrics", client=client)
    assert status == 401
    assert headers["content-type"] == "application/json"
    error = orjson.loads(body)["error"]
    assert error["code"] == "metrics_token_required"
    assert error["type"] == "authentication_error"
    assert "GPUPLEX_METRICS_TOKEN" in error["message"]
    assert b"gpuplex_gateway" not in body


@pytest.mark.parametrize("client", [*LOOPBACK, "203.0.113.9"])
def test_metrics_with_the_token_is_served_from_anywhere(client: str) -> None:
    app, _ = gateway()
    status, headers, body = get(app, "/metrics", client=client, authorization=f"Bearer {TOKEN}")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert b"gpuplex_gateway_requests_total" in body


@pytest.mark.parametrize(
    "authorization",
    [f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}", "Bearer ", TOKEN, "Bearer gpx_"],
)
def test_a_wrong_token_is_refused_even_from_a_listed_network(authorization: str) -> None:
    app, _ = gateway(metrics_from=("127.0.0.0/8",))
    status, _, body = get(app, "/metrics", authorization=authorization)
    assert status == 401
    assert orjson.loads(body)["error"]["code"] == "metrics_token_required"


def test_a_listed_network_reads_without_a_token_and_others_do_not() -> None:
    app, _ = gateway(metrics_from=("10.0.0.0/8",))
    assert get(app, "/metrics", client="10.9.8.7")[0] == 200
    assert get(app, "/metrics", client="127.0.0.1")[0] == 401
    assert get(app, "/metrics", client="not-an-address")[0] == 401


def test_without_a_configured_token_no_bearer_reads_metrics() -> None:
    app, _ = gateway(token=None)
    for authorization in (f"Bearer {TOKEN}", "Bearer ", None):
        assert get(app, "/metrics", authorization=authorization)[0] == 401
