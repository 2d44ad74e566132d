"""A client that goes away mid-request gets its request cancelled: by polling uvicorn's cycle flag,
or, under another server, by a task waiting for `http.disconnect`; never before admission.

Each step waits on what the watch did (its request is being watched, its flag was read), never
on a fixed sleep, so a loaded machine changes only how long a test takes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from gpuplex.core.serve.inference import Endpoint, InferenceRequest
from gpuplex.gateway.auth import Caller
from gpuplex.gateway.relay import DisconnectWatch, Exchange


def _exchange(request_id: str) -> Exchange:
    caller = Caller("acme", "abcd1234", frozenset(), None, ())
    request = InferenceRequest(Endpoint.CHAT, "m", False, 1, 16)
    return Exchange(request_id, 0.0, datetime.now(UTC), caller, request, "m")


class _Cycle:
    """Like uvicorn's RequestResponseCycle: a `disconnected` flag beside its `receive`. It counts
    how often the flag was read, so a test can wait until the watch has polled it."""

    def __init__(self) -> None:
        self.gone = False
        self.reads = 0
        self._read = asyncio.Event()

    @property
    def disconnected(self) -> bool:
        self.reads += 1
        self._read.set()
        return self.gone

    async def polled(self, times: int) -> None:
        """Return once the flag has been read `times` more times."""
        until = self.reads + times
        while self.reads < until:
            self._read.clear()
            await asyncio.wait_for(self._read.wait(), 2)

    async def receive(self) -> dict[str, object]:
        await asyncio.Event().wait()
        return {"type": "http.disconnect"}


async def _request(
    watch: DisconnectWatch, ex: Exchange, receive: object, watching: asyncio.Event
) -> str:
    task = asyncio.current_task()
    assert task is not None
    watch.watch(receive, ex, task)  # type: ignore[arg-type]
    watching.set()
    try:
        await asyncio.Event().wait()  # the upstream call, which ends only when cancelled
        return "finished"
    except asyncio.CancelledError:
        return "cancelled"
    finally:
        watch.unwatch(ex)


def test_a_vanished_uvicorn_client_is_noticed_by_polling_once_admitted() -> None:
    async def scenario() -> tuple[str, bool]:
        watch = DisconnectWatch(poll_s=0.01)
        cycle, ex = _Cycle(), _exchange("r1")
        ex.cancellable = True
        watching = asyncio.Event()
        request = asyncio.create_task(_request(watch, ex, cycle.receive, watching))
        await watching.wait()
        cycle.gone = True
        return await asyncio.wait_for(request, 2), ex.client_gone

    assert asyncio.run(scenario()) == ("cancelled", True)


def test_a_client_gone_during_admission_is_only_flagged() -> None:
    async def scenario() -> tuple[bool, bool]:
        watch = DisconnectWatch(poll_s=0.01)
        cycle, ex = _Cycle(), _exchange("r2")
        admitted = asyncio.Event()

        async def limiter_call() -> None:  # still running when the client goes
            await admitted.wait()

        task = asyncio.create_task(limiter_call())
        watch.watch(cycle.receive, ex, task)
        cycle.gone = True
        await cycle.polled(1)  # the poll that read the flag set client_gone before it returned
        flagged = ex.client_gone
        admitted.set()
        await task  # not cancelled: the limiter's call finishes, then the request ends itself
        watch.unwatch(ex)
        return flagged, task.cancelled()

    assert asyncio.run(scenario()) == (True, False)


def test_another_servers_disconnect_message_cancels_the_request() -> None:
    async def scenario() -> str:
        gone = asyncio.Event()

        async def receive() -> dict[str, object]:  # a plain function: no flag to poll
            await gone.wait()
            return {"type": "http.disconnect"}

        watch, ex = DisconnectWatch(), _exchange("r3")
        ex.cancellable = True
        watching = asyncio.Event()
        request = asyncio.create_task(_request(watch, ex, receive, watching))
        await watching.wait()
        gone.set()
        return await asyncio.wait_for(request, 2)

    assert asyncio.run(scenario()) == "cancelled"


def test_a_request_that_replied_is_never_cancelled() -> None:
    async def scenario() -> tuple[bool, bool]:
        watch = DisconnectWatch(poll_s=0.01)
        cycle, ex = _Cycle(), _exchange("r4")
        ex.cancellable = ex.replied = True
        watching = asyncio.Event()
        request = asyncio.create_task(_request(watch, ex, cycle.receive, watching))
        await watching.wait()
        cycle.gone = True
        await cycle.polled(3)  # three polls saw the client gone, after the reply had begun
        still_running = not request.done()
        request.cancel()  # the test's own stop
        await request
        return still_running, ex.client_gone

    assert asyncio.run(scenario()) == (True, False)
