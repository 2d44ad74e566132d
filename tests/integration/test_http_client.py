"""gpuplex.http_client against servers on loopback that answer as servers do, rudely too: any
status is an answer; a body past `max_bytes` is cut and said so; a server that stalls, or drips a
byte at a time past the deadline, is a TimeoutError; one that is not there, or closes mid-answer,
a ConnectionError; and nothing is asked compressed, so the bound holds on what the server sent."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from gpuplex.http_client import call
from tests.ports import free_port
from tests.raw_server import raw_server

Serve = Callable[[socket.socket], None]


@pytest.fixture
def server() -> Iterator[Callable[[Serve], str]]:
    """Starts servers that run `serve` on each accepted socket; each one's URL of a path."""
    with contextlib.ExitStack() as servers:
        yield lambda serve: servers.enter_context(raw_server(serve)) + "/x"


def read_request(connection: socket.socket) -> bytes:
    got = b""
    while b"\r\n\r\n" not in got:
        chunk = connection.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def answer(status: str, body: bytes, extra: str = "") -> Serve:
    def serve(connection: socket.socket) -> None:
        read_request(connection)
        head = (
            f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n{extra}connection: close\r\n\r\n"
        )
        connection.sendall(head.encode() + body)

    return serve


def test_any_status_is_an_answer(server: Callable[[Serve], str]) -> None:
    got = call("GET", server(answer("503 Service Unavailable", b'{"error": 1}')), timeout_s=5)
    assert (got.status, got.ok, got.complete, got.json_object()) == (503, False, True, {"error": 1})


def test_a_body_past_the_bound_is_cut_and_said_so(server: Callable[[Serve], str]) -> None:
    url = server(answer("200 OK", b"x" * 100_000))
    got = call("GET", url, timeout_s=5, max_bytes=1000)
    assert (got.complete, len(got.body)) == (False, 1001)
    whole = call("GET", url, timeout_s=5, max_bytes=100_000)
    assert (whole.complete, len(whole.body)) == (True, 100_000)


def test_nothing_is_asked_compressed(server: Callable[[Serve], str]) -> None:
    seen: list[bytes] = []

    def serve(connection: socket.socket) -> None:
        seen.append(read_request(connection).lower())
        connection.sendall(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n")

    call("GET", server(serve), timeout_s=5, headers={"Host": "exporter.svc:9400"})
    assert b"accept-encoding: identity\r\n" in seen[0]
    assert b"host: exporter.svc:9400\r\n" in seen[0]  # a caller's Host header is sent as given


def test_a_server_that_stalls_is_a_timeout(server: Callable[[Serve], str]) -> None:
    def serve(connection: socket.socket) -> None:
        read_request(connection)
        time.sleep(2)

    with pytest.raises(TimeoutError, match="timed out"):
        call("GET", server(serve), timeout_s=0.3)


def test_a_server_that_drips_past_the_deadline_is_a_timeout(server: Callable[[Serve], str]) -> None:
    """Every read gets a byte well within the stall limit; the deadline still ends it."""

    def serve(connection: socket.socket) -> None:
        read_request(connection)
        connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
        for _ in range(1000):
            connection.sendall(b"x")
            time.sleep(0.05)

    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"over 0\.5 s in all"):
        call("GET", server(serve), timeout_s=5, deadline_s=0.5)
    assert time.monotonic() - started < 5


def test_no_server_or_a_cut_answer_is_a_connection_error(server: Callable[[Serve], str]) -> None:
    port = free_port()  # nothing listens on it
    with pytest.raises(ConnectionError, match="Connection refused"):
        call("GET", f"http://127.0.0.1:{port}/x", timeout_s=5)

    def cut(connection: socket.socket) -> None:
        read_request(connection)
        connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nonly this")

    with pytest.raises(ConnectionError):
        call("GET", server(cut), timeout_s=5)
    with pytest.raises(ConnectionError, match="not an http"):
        call("GET", "ftp://127.0.0.1/x", timeout_s=5)
