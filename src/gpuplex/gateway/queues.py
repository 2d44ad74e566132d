"""The fair queue in front of one backend, as asyncio: a request waits for its turn (weighted fair
on tokens, `core.serve.fair_queue`), at most `max_wait_s`, then holds one of the backend's slots
until it calls `release`."""

from __future__ import annotations

import asyncio

from gpuplex.core.serve.fair_queue import FairQueue, QueuedRequest
from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError


class BackendQueue:
    def __init__(self, max_in_flight: int, max_waiting_per_tenant: int, max_wait_s: float) -> None:
        self.fair = FairQueue(
            max_in_flight, max_waiting_per_tenant, overflow=max(1, max_in_flight // 4)
        )
        self.max_wait_s = max_wait_s
        self._waiters: dict[str, asyncio.Future[None]] = {}

    async def acquire(self, request: QueuedRequest) -> None:
        """Returns once the request holds a slot. Raises ApiError (429) when the tenant's queue is
        full or the wait is over; a cancelled caller never keeps a slot."""
        if not self.fair.offer(request):
            raise ApiError(
                ErrorCode.QUEUE_FULL,
                f"too many requests waiting for this model ({self.fair.max_waiting_per_tenant})",
                retry_after_s=1,
            )
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[request.request_id] = future
        self._pump()
        if future.done():
            return
        try:
            await asyncio.wait_for(future, self.max_wait_s)
        except TimeoutError:
            if self.fair.cancel(request):
                self._waiters.pop(request.request_id, None)
                raise ApiError(
                    ErrorCode.QUEUE_TIMEOUT,
                    f"waited {self.max_wait_s:g} s for a turn on this model; try again later",
                    retry_after_s=max(1, round(self.max_wait_s / 2)),
                ) from None
            # dispatched at the moment the wait ended: the slot is ours
        except asyncio.CancelledError:
            if self.fair.cancel(request):
                self._waiters.pop(request.request_id, None)
            else:  # it was dispatched: give the slot back
                self.release(request, 0)
            raise

    def release(self, request: QueuedRequest, used_tokens: int) -> None:
        self.fair.finish(request, used_tokens)
        self._pump()

    def _pump(self) -> None:
        while (request := self.fair.dispatch()) is not None:
            future = self._waiters.pop(request.request_id, None)
            if future is not None and not future.done():
                future.set_result(None)
