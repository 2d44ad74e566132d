"""Clients for the front-door abuse tests and bench/abuse.py: raw sockets on loopback (nothing
buffered or retried behind the caller's back), a flood that stops as soon as the server answers,
the peak RSS of a process under attack, and a real `gpuplex server` to attack."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from gpuplex.clock import utc_now
from gpuplex.store.db import open_store
from gpuplex.store.tokens import TokenRepository
from tests.e2e.gateway.stack import free_port, stop

MIB = 1024 * 1024


@dataclass
class Target:
    """One real process under attack: where it listens and its pid (for its memory)."""

    name: str
    port: int
    pid: int
    health_path: str
    post_path: str  # a path that takes a body and needs credentials

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError(f"no VmRSS for pid {self.pid}")


def start_control_plane(
    directory: Path, spec_path: Path | None = None
) -> tuple[subprocess.Popen[bytes], int, str]:
    """`gpuplex server` on a new SQLite store in `directory`, with a platform-admin token: the
    process, its port and the token."""
    store_url = f"sqlite:///{directory / 'server.db'}"
    engine = open_store(store_url)
    secret, _ = TokenRepository(engine).create(
        name="abuse", role="platform-admin", tenant=None, expires_at=None, now=utc_now(), actor="t"
    )
    engine.dispose()
    port = free_port()
    log = (directory / "server.log").open("ab")
    argv = [sys.executable, "-m", "gpuplex.cli", "server", "--store", store_url]
    if spec_path is not None:
        argv += ["--spec", str(spec_path)]
    process = subprocess.Popen(  # noqa: S603 - our own CLI
        [*argv, "--port", str(port)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError((directory / "server.log").read_text())
        try:
            reply = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            if reply.status_code == 200 and process.poll() is None:  # ours, not a stranger
                return process, port, secret
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    stop(process)
    raise AssertionError("the control plane did not start within 30 s")


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def read_answer(sock: socket.socket, timeout_s: float = 5) -> bytes:
    """Everything the server sends until it closes (or resets) the connection."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return got


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]
    return int(answer.split(b" ", 2)[1])


def error_code(answer: bytes) -> str:
    head, body_bytes = answer.split(b"\r\n\r\n", 1)
    if b"transfer-encoding: chunked" in head.lower():
        body_bytes = body_bytes.split(b"\r\n", 1)[1].rsplit(b"\r\n0\r\n", 1)[0]
    body = json.loads(body_bytes)
    code: str = body["error"]["code"]
    return code


def closed_within(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server closes `sock` within `timeout_s` (whatever it answers first)."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            return False
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
    return False


def probe(port: int, path: str, source: str = "127.0.0.1") -> int:
    with connect(port, source) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n".encode())
        return status_of(read_answer(sock))


@dataclass
class Flood:
    answer: bytes
    sent_bytes: int
    answered_after_s: float


def flood(port: int, head: bytes, filler: bytes, total_bytes: int) -> Flood:
    """Send `head`, then `filler` again and again up to `total_bytes`, as fast as the server
    reads it, and stop as soon as it answers (or closes)."""
    sock = connect(port)
    started = time.monotonic()
    sent = 0
    try:
        sock.sendall(head)
        sock.setblocking(False)
        block = filler * max(1, 65536 // len(filler))
        while sent < total_bytes and time.monotonic() - started < 10:
            readable, writable, _ = select.select([sock], [sock], [], 1)
            if readable:
                break
            if writable:
                try:
                    sent += sock.send(block)
                except BlockingIOError:
                    continue
                except (BrokenPipeError, ConnectionResetError):
                    break
        answered_after_s = time.monotonic() - started
        sock.setblocking(True)
        return Flood(read_answer(sock), sent, answered_after_s)
    finally:
        sock.close()


class PeakRss:
    """The most a process's RSS rose above where it was at the start, sampled every 5 ms."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.start_mib = target.rss_mib()
        self.peak_mib = self.start_mib
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_mib = max(self.peak_mib, self.target.rss_mib())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_mib = max(self.peak_mib, self.target.rss_mib())

    @property
    def growth_mib(self) -> float:
        return self.peak_mib - self.start_mib
