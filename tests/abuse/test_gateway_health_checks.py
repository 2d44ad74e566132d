"""The gateway's health checks never share the forwarding side: with the process out of file
descriptors (as ~20,000 idle client connections once left it), a replica that answers stays up, on
the health checks' own kept-alive connection, and a check that cannot open a socket here changes
nothing; a replica that is really down is still marked down."""

from __future__ import annotations

import asyncio
import errno
import resource
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp
import pytest

from gpuplex.core.serve.routes import Backend
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.gateway.backends import BackendPool, run_health_checks
from tests.e2e.gateway.stack import free_port


@contextmanager
def out_of_file_descriptors() -> Iterator[None]:
    """This process, out of file descriptors: the soft limit lowered to a few above what is open,
    and those few taken."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(list(Path("/proc/self/fd").iterdir()))
    hogs: list[socket.socket] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 16, hard))
    try:
        while True:
            try:
                hogs.append(socket.socket())
            except OSError as error:
                exhausted = error.errno
                break
        assert exhausted == errno.EMFILE
        yield
    finally:
        for hog in hogs:
            hog.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _health_replica(keep_alive: bool) -> tuple[asyncio.Server, str, Callable[[], int]]:
    served = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                served += 1
                close = b"" if keep_alive else b"connection: close\r\n"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n" + close + b"\r\nok")
                await writer.drain()
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", lambda: served


@pytest.mark.parametrize("keep_alive", [True, False])
def test_health_checks_keep_a_replica_up_while_the_process_is_out_of_file_descriptors(
    keep_alive: bool,
) -> None:
    async def scenario() -> None:
        server, url, served = await _health_replica(keep_alive)
        pool = BackendPool(Backend("acme/chat", (url,)), GatewaySpec(), 1)
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks([pool], 0.05, stop_checks))
        forwarding = aiohttp.ClientSession()
        try:
            while served() < 2:
                await asyncio.sleep(0.01)
            with out_of_file_descriptors():
                with pytest.raises(aiohttp.ClientConnectorError):  # forwarding cannot connect
                    async with forwarding.get(url):
                        pass
                before = served()
                await asyncio.sleep(0.5)
                assert pool.replicas[0].healthy
                assert (served() > before) is keep_alive  # on its open connection, else none
            await asyncio.sleep(0.2)
            assert pool.replicas[0].healthy
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)
            await forwarding.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_replica_that_is_down_is_still_marked_down() -> None:
    async def scenario() -> None:
        pool = BackendPool(
            Backend("acme/chat", (f"http://127.0.0.1:{free_port()}",)), GatewaySpec(), 1
        )
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks([pool], 0.05, stop_checks))
        try:
            deadline = time.monotonic() + 2
            while pool.replicas[0].healthy and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not pool.replicas[0].healthy
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)

    asyncio.run(scenario())


def test_a_replica_coming_up_is_logged_at_info_and_going_down_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        server, url, _ = await _health_replica(keep_alive=False)  # closing it ends all
        pool = BackendPool(Backend("acme/chat", (url,)), GatewaySpec(), 1)
        pool.replicas[0].healthy = False
        stop_checks = asyncio.Event()
        checks = asyncio.create_task(run_health_checks([pool], 0.05, stop_checks))
        try:
            while not pool.replicas[0].healthy:
                await asyncio.sleep(0.01)
            server.close()
            await server.wait_closed()
            deadline = time.monotonic() + 5
            while pool.replicas[0].healthy and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            stop_checks.set()
            await asyncio.wait_for(checks, 5)

    with caplog.at_level("INFO", logger="gpuplex.gateway.backends"):
        asyncio.run(scenario())
    said = {
        (r.levelname, r.getMessage().rsplit(" ", 1)[-1])
        for r in caplog.records
        if " is " in r.getMessage()
    }
    assert ("INFO", "up") in said
    assert ("WARNING", "down") in said
    assert ("WARNING", "up") not in said
