"""Abuse benchmark, the attacks: idle connections, slowloris, header floods and huge bodies without
credentials, each against one listening port from its own loopback addresses (127.0.x.y all reach
the same machine), each returning what the server did with it. Raw sockets: nothing is retried,
buffered or closed early behind the attacker's back, and an attacker never stops on an answer; it
stops when the server closes the connection."""

from __future__ import annotations

import contextlib
import selectors
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

MIB = 1024 * 1024
BLOCK = 64 * 1024


@dataclass
class Held:
    """Connections opened and held: how many the server took, and when it closed them."""

    opened: int = 0
    refused_at_once: int = 0  # answered and closed within 100 ms of opening
    answered_408: int = 0
    close_s: list[float] | None = None  # seconds from opening to the server's close, per socket
    still_open: int = 0

    def closed_by_s(self) -> str:
        if not self.close_s:
            return "none closed"
        return f"median {statistics.median(self.close_s):.1f} s, last {max(self.close_s):.1f} s"


@dataclass
class Sent:
    """Bytes pushed at the server over some connections, until it closed each."""

    connections: int = 0
    sent_bytes: int = 0
    answered_ms: list[float] | None = None  # from the connection's first byte to the answer
    statuses: dict[int, int] | None = None

    def most_taken_mib(self) -> float:
        return self.sent_bytes / max(1, self.connections) / MIB


def open_many(port: int, count: int, sources: list[str]) -> list[socket.socket]:
    sockets = []
    for n in range(count):
        source = sources[n % len(sources)]
        sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def hold(
    sockets: list[socket.socket],
    deadline_s: float,
    trickle: Callable[[socket.socket], object] | None = None,
    trickle_every_s: float = 1.0,
) -> Held:
    """Hold `sockets` open until the server closes them all or `deadline_s` passes, calling
    `trickle` on each open one every `trickle_every_s` (a slowloris's next header byte)."""
    started = time.monotonic()
    result = Held(opened=len(sockets), close_s=[])
    assert result.close_s is not None
    answers: dict[socket.socket, bytes] = {sock: b"" for sock in sockets}
    selector = selectors.DefaultSelector()
    for sock in sockets:
        selector.register(sock, selectors.EVENT_READ)
    next_trickle = started + trickle_every_s
    while answers and time.monotonic() - started < deadline_s:
        for key, _ in selector.select(timeout=0.05):
            sock = cast("socket.socket", key.fileobj)
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, BlockingIOError):
                chunk = b""
            if chunk:
                answers[sock] += chunk
                continue
            elapsed = time.monotonic() - started
            result.close_s.append(elapsed)
            if answers[sock].startswith(b"HTTP/1.1 408"):
                result.answered_408 += 1
            if answers[sock] and elapsed < 0.1:
                result.refused_at_once += 1
            selector.unregister(sock)
            del answers[sock]
        if trickle is not None and time.monotonic() >= next_trickle:
            next_trickle += trickle_every_s
            for sock in answers:
                with contextlib.suppress(OSError):
                    trickle(sock)
    result.still_open = len(answers)
    selector.close()
    for sock in sockets:
        sock.close()
    return result


def blast(port: int, head: bytes, filler: bytes, most_bytes: int, source: str) -> Sent:
    """One connection: `head`, then `filler` over and over, as fast as the server takes it, up to
    `most_bytes`, until the connection is reset or the server has taken nothing for a second;
    the answer (and the server's FIN) are noted, never obeyed."""
    block = filler * max(1, BLOCK // len(filler))
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.setblocking(False)
    started = time.monotonic()
    sent, answer, answered_ms = 0, b"", None
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    pending = head
    try:
        while sent < most_bytes and time.monotonic() - started < 30:
            events = selector.select(timeout=1)
            if not events:
                break  # the server stopped reading: the attacker gives up on this one
            mask = events[0][1]
            if mask & selectors.EVENT_READ:
                chunk = sock.recv(65536)
                if not chunk:  # the server's FIN: an attacker keeps pushing all the same
                    selector.modify(sock, selectors.EVENT_WRITE)
                    continue
                if answered_ms is None:
                    answered_ms = (time.monotonic() - started) * 1000
                answer += chunk
            if mask & selectors.EVENT_WRITE:
                n = sock.send(pending or block)
                sent += n
                pending = pending[n:]
    except (BrokenPipeError, ConnectionResetError, BlockingIOError):
        pass
    finally:
        selector.close()
        sock.close()
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0
    return Sent(1, sent, [answered_ms] if answered_ms is not None else [], {status: 1})


def add(total: Sent, one: Sent) -> None:
    total.connections += one.connections
    total.sent_bytes += one.sent_bytes
    total.answered_ms = (total.answered_ms or []) + (one.answered_ms or [])
    statuses = total.statuses or {}
    for status, n in (one.statuses or {}).items():
        statuses[status] = statuses.get(status, 0) + n
    total.statuses = statuses


def header_flood(
    port: int, total_bytes: int, parallel: int, sources: list[str], min_s: float
) -> Sent:
    """At least `total_bytes` of header lines, for at least `min_s`, over as many connections as
    it takes, `parallel` at once."""
    head = b"GET / HTTP/1.1\r\nhost: victim\r\n"
    line = b"x-flood: " + b"a" * 50 + b"\r\n"

    def attempt(n: int) -> Sent:
        return blast(port, head, line, total_bytes, sources[n % len(sources)])

    return _until(total_bytes, min_s, parallel, attempt)


def body_flood(
    port: int, path: str, body_bytes: int, bodies: int, sources: list[str], min_s: float
) -> Sent:
    """`bodies` requests at once, again and again for at least `min_s`, each declaring a
    `body_bytes` body and sending it, without any credentials."""
    head = f"POST {path} HTTP/1.1\r\nhost: victim\r\ncontent-type: application/json\r\n"
    raw_head = (head + f"content-length: {body_bytes}\r\n\r\n").encode()

    def attempt(n: int) -> Sent:
        return blast(port, raw_head, b"[" * BLOCK, body_bytes, sources[n % len(sources)])

    return _until(body_bytes, min_s, bodies, attempt)


def _until(total_bytes: int, min_s: float, parallel: int, attempt: Callable[[int], Sent]) -> Sent:
    """`attempt`s, `parallel` at once, until `total_bytes` were sent and `min_s` has passed."""
    total = Sent(statuses={})
    lock = threading.Lock()
    started = time.monotonic()

    def worker(n: int) -> None:
        while True:
            with lock:
                if total.sent_bytes >= total_bytes and time.monotonic() - started >= min_s:
                    return
            result = attempt(n)
            with lock:
                add(total, result)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return total
