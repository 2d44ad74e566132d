"""The gateway's health checks never share the forwarding side: with the process out of file
descriptors (as ~20,000 idle client connections once left it), a replica that answers stays up, on
the health checks' own kept-alive connection, and a check that cannot open a socket here changes
nothing; a replica that is really down is still marked down."""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import httpx
import pytest

from gpuplex.core.serve.routes import Backend
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.gateway.backends import BackendPool, run_health_checks
from tests.e2e.gateway.stack import free_port

pytestmark = pytest.mark.lane


@contextmanager
def out_of_file_descriptors() -> Iterator[Callable[[], None]]:
    """This process, out of file descriptors: the soft limit lowered to a few above what is open,
    and those few taken. Yields `take_freed`, which takes any descriptor freed since (a
    connection that was open when the process ran out closes later, and frees one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(list(Path("/proc/self/fd").iterdir()))
    hogs: list[socket.socket] = []

    def take_freed() -> None:
        while True:
            try:
                hogs.append(socket.socket())
            except OSError as error:
                if error.errno != errno.EMFILE:
                    raise
                return

    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 16, hard))
    try:
        take_freed()
        yield take_freed
    finally:
        for hog in hogs:
            hog.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


#: A replica in a process of its own, as a model server is: only the gateway's process runs out of
#: file descriptors (a replica in the test's process could not accept either, and a check already
#: connecting would time out against it). It prints its port, answers /health, and `GET /served`
#: lists when (CLOCK_MONOTONIC, the same clock in every process) it answered each health request.
REPLICA = r"""
import asyncio, json, sys, time
keep_alive = sys.argv[1] == "1"
served = []
async def answer(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET /served"):
                body = json.dumps(served).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                await writer.drain()
                break
            served.append(time.monotonic())
            close = b"" if keep_alive else b"connection: close\r\n"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + close + b"\r\nok")
            await writer.drain()
            if not keep_alive:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()
async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


@contextmanager
def replica_process(keep_alive: bool) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """(its URL, the process): killed on leaving, if not before."""
    command = [sys.executable, "-c", REPLICA, "1" if keep_alive else "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:  # noqa: S603
        try:
            assert process.stdout is not None
            yield f"http://127.0.0.1:{int(process.stdout.readline())}", process
        finally:
            process.kill()


def served_at(url: str) -> list[float]:
    return [float(t) for t in httpx.get(f"{url}/served", timeout=5).json()]


@pytest.mark.parametrize("keep_alive", [True, False])
def test_health_checks_keep_a_replica_up_while_the_process_is_out_of_file_descriptors(
    keep_alive: bool,
) -> None:
    async def scenario(url: str) -> tuple[float, float]:
        pool = BackendPool(Backend("acme/chat", (url,)), GatewaySpec(), 1)
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks(lambda: [pool], 0.05, stop_checks))
        forwarding = aiohttp.ClientSession()
        try:
            while not pool.replicas[0].healthy or len(await asyncio.to_thread(served_at, url)) < 2:
                await asyncio.sleep(0.01)
            with out_of_file_descriptors() as take_freed:
                with pytest.raises(aiohttp.ClientConnectorError):  # forwarding cannot connect
                    async with forwarding.get(url):
                        pass
                settled = time.monotonic() + 0.2  # a check in flight may finish meanwhile
                while time.monotonic() < settled:
                    take_freed()
                    await asyncio.sleep(0.001)
                starved_from = time.monotonic()
                while time.monotonic() < starved_from + 0.5:
                    take_freed()
                    await asyncio.sleep(0.001)
                starved_until = time.monotonic()
                assert pool.replicas[0].healthy
            await asyncio.sleep(0.2)
            assert pool.replicas[0].healthy
            return starved_from, starved_until
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)
            await forwarding.close()

    with replica_process(keep_alive) as (url, _):
        starved_from, starved_until = asyncio.run(scenario(url))
        answered = [t for t in served_at(url) if starved_from < t < starved_until]
    assert bool(answered) is keep_alive  # on its open connection, else none


def test_a_replica_that_is_down_is_still_marked_down() -> None:
    async def scenario() -> None:
        pool = BackendPool(
            Backend("acme/chat", (f"http://127.0.0.1:{free_port()}",)), GatewaySpec(), 1
        )
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks(lambda: [pool], 0.05, stop_checks))
        try:
            deadline = time.monotonic() + 2
            while not pool.checked and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert pool.checked  # a check was made, and said what it found
            assert not pool.replicas[0].healthy
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)

    asyncio.run(scenario())


def test_a_replica_coming_up_is_logged_at_info_and_going_down_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario(url: str, replica: subprocess.Popen[str]) -> None:
        pool = BackendPool(Backend("acme/chat", (url,)), GatewaySpec(), 1)
        pool.replicas[0].healthy = False
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks(lambda: [pool], 0.05, stop_checks))
        try:
            while not pool.replicas[0].healthy:
                await asyncio.sleep(0.01)
            replica.kill()
            deadline = time.monotonic() + 5
            while pool.replicas[0].healthy and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)

    with (
        replica_process(keep_alive=False) as (url, replica),
        caplog.at_level("INFO", logger="gpuplex.gateway.backends"),
    ):
        asyncio.run(scenario(url, replica))
    said = {
        (r.levelname, r.getMessage().rsplit(" ", 1)[-1])
        for r in caplog.records
        if " is " in r.getMessage()
    }
    assert ("INFO", "up") in said
    assert ("WARNING", "down") in said
    assert ("WARNING", "up") not in said
