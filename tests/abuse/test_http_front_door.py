"""Denial of service at the HTTP layer, against real processes on loopback: a `gpuplex gateway`
(with a simulated model server) and a `gpuplex server`, each started once for the module.

Nobody, with or without a key, may grow either process's memory with header floods or huge
bodies, hold connections open without sending a request, take every connection from one address,
or get a chunked reply over HTTP/1.0; and the gateway's health checks keep a replica up while the
process is out of file descriptors. The counts and timeouts are small (the gateway's spec sets
them; the control plane's timeouts are tested in-process with its own wiring), so the module runs
in well under 30 s on two cores."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.http_limits import HttpLimits
from gpuplex.server.app import create_app
from gpuplex.server.context import ServerContext
from gpuplex.server.run import ROLLUP_WINDOW_S, http_options
from gpuplex.store.db import open_store
from tests.abuse.front_door import (
    MIB,
    PeakRss,
    Target,
    closed_within,
    connect,
    error_code,
    flood,
    probe,
    read_answer,
    start_control_plane,
    status_of,
)
from tests.e2e.gateway.stack import Gateway, Stack, free_port, stop

pytestmark = pytest.mark.lane

#: The most either process may grow under any one attack here.
MAX_GROWTH_MIB = 64
HEADER_TIMEOUT_S = 1.0
PER_CLIENT = 50
TOTAL = 300

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
        serve: {model: acme-chat, port: {sim_port}}
gateway:
  port: {gateway_port}
  health_interval_s: 0.5
  header_timeout_s: 1
  keep_alive_timeout_s: 2
  max_connections: 300
  max_connections_per_client: 50
"""


@dataclass
class Front:
    gateway: Target
    server: Target
    stack: Stack
    gateway_process: Gateway
    admin_token: str

    def target(self, name: str) -> Target:
        return self.gateway if name == "gateway" else self.server


@pytest.fixture(scope="module")
def front() -> Iterator[Front]:
    directory = Path(tempfile.mkdtemp(prefix="gpuplex-front-door-"))
    directory.chmod(0o755)
    stack = Stack(directory, f"sqlite:///{directory / 'gpuplex.db'}")
    server: subprocess.Popen[bytes] | None = None
    try:
        sim_port = stack.sim(["acme-chat"])
        gateway = stack.gateway(SPEC.replace("{sim_port}", str(sim_port)))
        assert gateway.process is not None
        server, server_port, token = start_control_plane(directory)
        yield Front(
            gateway=Target(
                "gateway", gateway.port, gateway.process.pid, "/health", "/v1/chat/completions"
            ),
            server=Target("server", server_port, server.pid, "/healthz", "/api/v1/tokens"),
            stack=stack,
            gateway_process=gateway,
            admin_token=token,
        )
    finally:
        if server is not None:
            stop(server)
        stack.close()
        shutil.rmtree(directory, ignore_errors=True)


# item 2: memory


@pytest.mark.parametrize("name", ["gateway", "server"])
def test_a_header_flood_is_answered_431_at_once_and_memory_stays_flat(
    front: Front, name: str
) -> None:
    target = front.target(name)
    head = f"GET {target.health_path} HTTP/1.1\r\nhost: t\r\n".encode()
    with PeakRss(target) as rss:
        floods = [
            flood(target.port, head, b"x-flood: " + b"a" * 50 + b"\r\n", 100 * MIB),  # many lines
            flood(target.port, head + b"x-one: ", b"b" * 1024, 100 * MIB),  # one endless line
        ]
    for result in floods:
        assert status_of(result.answer) == 431, result.answer[:300]
        assert error_code(result.answer) in ("headers_too_large", "too_many_headers")
        assert result.answered_after_s < 1.0
        assert result.sent_bytes < 20 * MIB  # the rest was never read, so never sent
    assert rss.growth_mib < MAX_GROWTH_MIB, f"{name} grew {rss.growth_mib:.0f} MiB"
    assert probe(target.port, target.health_path) == 200


HEADS = {
    "request line": (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nhost: t\r\n\r\n", 414),
    "101 headers": (b"GET / HTTP/1.1\r\n" + b"x-a: b\r\n" * 101 + b"\r\n", 431),
    "a 40 KiB header": (b"GET / HTTP/1.1\r\nx-big: " + b"c" * 40 * 1024 + b"\r\n\r\n", 431),
    "not HTTP": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
}


@pytest.mark.parametrize("name", ["gateway", "server"])
@pytest.mark.parametrize("case", list(HEADS))
def test_a_head_over_a_limit_is_refused(front: Front, name: str, case: str) -> None:
    raw, status = HEADS[case]
    with connect(front.target(name).port) as sock:
        sock.sendall(raw)
        answer = read_answer(sock)
    assert status_of(answer) == status
    assert error_code(answer)  # JSON, with a stable code


@pytest.mark.parametrize("auth", ["none", "unknown token", "chunked, none"])
@pytest.mark.parametrize("name", ["gateway", "server"])
def test_a_150_mb_body_without_valid_credentials_is_refused_unread(
    front: Front, name: str, auth: str
) -> None:
    target = front.target(name)
    lines = [f"POST {target.post_path} HTTP/1.1", "host: t", "content-type: application/json"]
    if auth == "unknown token":
        lines.append("authorization: Bearer gpt_abcdefgh_0123456789abcdef0123456789")
    lines.append(
        "transfer-encoding: chunked"
        if auth.startswith("chunked")
        else f"content-length: {150 * MIB}"
    )
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    filler = b"10000\r\n" + b"[" * 65536 + b"\r\n" if auth.startswith("chunked") else b"[" * 65536
    with PeakRss(target) as rss:
        result = flood(target.port, head, filler, 150 * MIB)
    assert status_of(result.answer) == 401, result.answer[:300]
    code = error_code(result.answer)
    assert code == ("invalid_api_key" if name == "gateway" else "unauthenticated")
    assert result.answered_after_s < 1.0
    assert result.sent_bytes < 20 * MIB
    assert rss.growth_mib < MAX_GROWTH_MIB


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_admin_body_over_the_limit_is_refused_413_before_or_while_reading(
    front: Front, framing: str
) -> None:
    target = front.server
    lines = [
        f"POST {target.post_path} HTTP/1.1",
        "host: t",
        "content-type: application/json",
        f"authorization: Bearer {front.admin_token}",
        "transfer-encoding: chunked" if framing == "chunked" else f"content-length: {150 * MIB}",
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    filler = b"10000\r\n" + b" " * 65536 + b"\r\n" if framing == "chunked" else b" " * 65536
    with PeakRss(target) as rss:
        result = flood(target.port, head, filler, 150 * MIB)
    assert status_of(result.answer) == 413, result.answer[:300]
    assert error_code(result.answer) == "request_too_large"
    assert result.sent_bytes < 40 * MIB
    assert rss.growth_mib < MAX_GROWTH_MIB


# item 3: connections


def test_idle_connections_are_closed_after_the_header_timeout(front: Front) -> None:
    port = front.gateway.port
    sockets = [connect(port, f"127.0.1.{1 + n // PER_CLIENT}") for n in range(200)]
    try:
        opened = time.monotonic()
        assert not closed_within(sockets[0], HEADER_TIMEOUT_S * 0.5)
        assert all(closed_within(sock, 2 * HEADER_TIMEOUT_S) for sock in sockets)
        assert time.monotonic() - opened < 3 * HEADER_TIMEOUT_S
    finally:
        for sock in sockets:
            sock.close()
    assert probe(port, "/health") == 200


def test_a_slowloris_is_answered_408_and_closed_after_the_header_timeout(front: Front) -> None:
    port = front.gateway.port
    sockets = [connect(port, "127.0.2.1") for _ in range(20)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /health HTTP/1.1\r\n")
        started = time.monotonic()
        while time.monotonic() - started < 2 * HEADER_TIMEOUT_S:
            for sock in sockets:
                with contextlib.suppress(OSError):
                    sock.send(b"x")  # a header byte every 100 ms: never done
            time.sleep(0.1)
        answers = [read_answer(sock, 1) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    assert all(status_of(answer) == 408 for answer in answers)
    assert {error_code(answer) for answer in answers} == {"header_timeout"}


def test_past_the_per_address_cap_a_connection_is_refused_503_and_others_are_served(
    front: Front,
) -> None:
    port = front.gateway.port
    held = [connect(port, "127.0.3.1") for _ in range(PER_CLIENT)]
    try:
        started = time.monotonic()
        with connect(port, "127.0.3.1") as extra:
            answer = read_answer(extra, 1)
        assert time.monotonic() - started < 0.8
        assert status_of(answer) == 503
        assert error_code(answer) == "too_many_connections"
        assert probe(port, "/health", "127.0.0.1") == 200  # another address is served
        assert not closed_within(held[-1], 0.05)  # and those held stay until their timeout
    finally:
        for sock in held:
            sock.close()


def test_at_the_total_cap_the_oldest_idle_connection_makes_room(front: Front) -> None:
    port = front.gateway.port
    held = [connect(port, f"127.0.4.{1 + n // PER_CLIENT}") for n in range(TOTAL)]
    try:
        assert probe(port, "/health", "127.0.0.1") == 200
        assert closed_within(held[0], 0.3)  # the oldest one waiting for a request, closed
    finally:
        for sock in held:
            sock.close()


def test_a_kept_alive_connection_is_closed_after_the_keep_alive_timeout(front: Front) -> None:
    with connect(front.gateway.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: t\r\n\r\n")
        sock.settimeout(2)
        assert status_of(sock.recv(65536)) == 200
        assert not closed_within(sock, 1.0)
        assert closed_within(sock, 2.0)  # keep_alive_timeout_s: 2


def test_a_later_slow_head_on_a_kept_alive_connection_gets_its_own_full_timeout(
    front: Front,
) -> None:
    """The head timer is armed once per connection and moved lazily: a second request's head,
    begun half a timeout after the connection opened, still gets a whole timeout, then 408."""
    with connect(front.gateway.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: t\r\n\r\n")
        sock.settimeout(2)
        first = b""
        while not first.endswith(b"\r\n0\r\n\r\n"):  # the whole chunked answer
            first += sock.recv(65536)
        assert status_of(first) == 200
        time.sleep(HEADER_TIMEOUT_S * 0.5)
        began = time.monotonic()
        sock.sendall(b"GET /health HTTP/1.1\r\n")  # and never the rest
        answer = read_answer(sock, 3)
        waited = time.monotonic() - began
    assert status_of(answer) == 408
    assert error_code(answer) == "header_timeout"
    assert waited >= HEADER_TIMEOUT_S * 0.9  # not cut short at the connection's first deadline


@pytest.fixture
def control_plane_in_process(tmp_path: Path) -> Iterator[int]:
    """The control plane's own app and front-door wiring (`http_options`), in this process,
    with a 1 s header timeout and small connection caps."""
    engine = open_store(f"sqlite:///{tmp_path / 'cp.db'}")
    ctx = ServerContext.open(engine, SYSTEM_CLOCK, ROLLUP_WINDOW_S)
    limits = HttpLimits(header_timeout_s=1.0, max_connections=40, max_connections_per_client=10)
    port = free_port()
    config = uvicorn.Config(
        create_app(ctx), host="127.0.0.1", port=port, log_level="warning", **http_options(limits)
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
        engine.dispose()


def test_the_control_plane_closes_idle_and_slow_connections_and_caps_an_address(
    control_plane_in_process: int,
) -> None:
    port = control_plane_in_process
    idle = [connect(port, "127.0.5.1") for _ in range(10)]
    slow = connect(port, "127.0.5.2")
    try:
        with connect(port, "127.0.5.1") as extra:
            assert status_of(read_answer(extra, 1)) == 503
        assert probe(port, "/healthz", "127.0.5.3") == 200
        slow.sendall(b"GET /healthz HTTP/1.1\r\nhost")
        assert all(closed_within(sock, 2 * HEADER_TIMEOUT_S) for sock in idle)
        assert status_of(read_answer(slow, 1)) == 408
    finally:
        for sock in [*idle, slow]:
            sock.close()


# item 10, part: HTTP/1.0


@pytest.mark.parametrize("name", ["gateway", "server"])
def test_an_http10_client_gets_a_reply_without_chunked_encoding(front: Front, name: str) -> None:
    target = front.target(name)
    with connect(target.port) as sock:
        sock.sendall(f"GET {target.health_path} HTTP/1.0\r\n\r\n".encode())
        answer = read_answer(sock)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert status_of(answer) == 200
    assert b"transfer-encoding" not in head.lower()
    assert json.loads(body)["status"] == "ok"


def test_an_http10_client_gets_a_stream_that_ends_where_the_connection_closes(
    front: Front,
) -> None:
    key = front.stack.key("acme")
    body = json.dumps(
        {"model": "acme-chat", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.0\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    with connect(front.gateway.port) as sock:
        sock.sendall(request)
        answer = read_answer(sock, 10)
    head, stream = answer.split(b"\r\n\r\n", 1)
    assert status_of(answer) == 200, answer[:500]
    assert b"transfer-encoding" not in head.lower()
    assert b"content-length" not in head.lower()
    assert stream.rstrip().endswith(b"data: [DONE]")


def test_a_control_plane_body_that_trickles_gets_408_at_its_deadline() -> None:
    """The body timeout of the control plane's body guard, on its own (30 s in the server)."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.types import Message

    from gpuplex.server.body_guard import BodyGuard

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = await Request(scope, receive).body()
        await JSONResponse({"read": len(body)})(scope, receive, send)

    async def scenario() -> list[Message]:
        chunks: list[Message] = [{"type": "http.request", "body": b"{", "more_body": True}]
        sent: list[Message] = []

        async def receive() -> Message:
            if chunks:
                return chunks.pop()
            await asyncio.sleep(3600)  # the rest never comes
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/dashboard/x",
            "headers": [(b"content-length", b"100")],
        }
        guard = BodyGuard(app, body_timeout_s=0.2)
        await asyncio.wait_for(guard(scope, receive, send), 5)
        return sent

    sent = asyncio.run(scenario())
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_timeout"
    assert len(sent) == 2  # the app's own reply, after its body was cut, never went out
