"""How often the gateway checks a backend's replicas: a backend none of whose replicas has answered
yet (a model server still starting) is checked again within a fraction of a second, so it gets
traffic as soon as it answers; a backend that answers is checked once an interval, no more.

Real sockets and aiohttp, one event loop; the replica is a bare asyncio HTTP server that counts the
checks it answers."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from gpuplex.core.serve.routes import Backend
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.gateway.backends import BackendPool, BackendState, run_health_checks
from tests.e2e.gateway.stack import free_port

#: Far longer than the test waits: any check after the first round comes from the starting rule.
LONG_INTERVAL_S = 60.0


class Replica:
    """An HTTP server on `port` that answers every request 200 and counts them."""

    def __init__(self) -> None:
        self.answered = 0

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                self.answered += 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def serve(self, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._answer, "127.0.0.1", port)


async def _until(condition: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until `condition()` holds; raises TimeoutError past `timeout_s`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise TimeoutError
        await asyncio.sleep(0.01)
    return time.monotonic() - started


def test_a_model_server_that_comes_up_after_the_first_check_is_ready_within_a_second() -> None:
    async def scenario() -> float:
        port = free_port()
        pool = BackendPool(Backend("acme/chat", (f"http://127.0.0.1:{port}",)), GatewaySpec(), 1)
        stop = asyncio.Event()
        checks = asyncio.create_task(run_health_checks(lambda: [pool], LONG_INTERVAL_S, stop))
        server: asyncio.Server | None = None
        try:
            await _until(lambda: pool.checked, 5)
            assert pool.state() is BackendState.STARTING  # nothing listens yet
            await asyncio.sleep(0.5)  # several early checks find nothing either
            assert pool.state() is BackendState.STARTING
            server = await Replica().serve(port)
            return await _until(lambda: pool.state() is BackendState.READY, 10)
        finally:
            stop.set()
            await asyncio.wait_for(checks, 5)
            if server is not None:
                server.close()

    took_s = asyncio.run(scenario())
    assert took_s < LONG_INTERVAL_S / 6  # the next round would have come after 60 s


def test_a_backend_that_answers_is_checked_once_an_interval() -> None:
    interval_s = 1.0

    async def scenario() -> int:
        replica = Replica()
        server = await replica.serve(0)
        port = server.sockets[0].getsockname()[1]
        pool = BackendPool(Backend("acme/chat", (f"http://127.0.0.1:{port}",)), GatewaySpec(), 1)
        stop = asyncio.Event()
        checks = asyncio.create_task(run_health_checks(lambda: [pool], interval_s, stop))
        try:
            await _until(lambda: pool.state() is BackendState.READY, 5)
            counted_from = replica.answered
            await asyncio.sleep(2.5 * interval_s)
            return replica.answered - counted_from
        finally:
            stop.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(checks, 5)
            server.close()

    checks_in_two_and_a_half_intervals = asyncio.run(scenario())
    assert 1 <= checks_in_two_and_a_half_intervals <= 3  # not one every STARTING_CHECK_S (10)
