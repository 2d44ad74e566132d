"""A model server's reply on its way to the client, bounded: a whole reply is read up to
`gateway.max_reply_mib`, a stream is relayed event by event with no event longer than
`gateway.max_event_kib` (a misbehaving server gets the client a 502, never the gateway's memory),
and both name the model the tenant called, not the server's name for it. A stream's token arrivals
are timed as they are read (core/serve/token_timing.py: time to first token, inter-token latency);
a whole reply's are not, since the gateway cannot see when its first token was made.
`DisconnectWatch` notices a client that went away and cancels its request, so the model server
stops generating."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import aiohttp

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.inference import InferenceRequest
from gpuplex.core.serve.sse import EventSplitter, EventTooLong, model_renamer, rename_model
from gpuplex.core.serve.stream_usage import StreamUsage, read_reply
from gpuplex.core.serve.token_timing import TokenTiming
from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError, error_body
from gpuplex.gateway.asgi_io import Receive, Send
from gpuplex.gateway.auth import Caller
from gpuplex.observe import gateway_metrics as metrics

if TYPE_CHECKING:
    from gpuplex.gateway.runtime import GatewayRuntime

log = logging.getLogger(__name__)

CLIENT_GONE = 499  # nginx's code for "the client closed the connection": outcome `cancelled`


@dataclass(slots=True)
class Exchange:
    """What is known of one request as it goes through."""

    request_id: str
    started_s: float
    started_at: datetime
    caller: Caller
    request: InferenceRequest
    upstream_model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: int = 0
    recorded: bool = False
    forwarded: bool = False  # sent to a model server, which read its prompt
    stream_started: bool = False  # a stream's first bytes went to the client
    replied: bool = False  # the last bytes are on their way: the request is over
    cancellable: bool = False  # admitted: cancelling cannot lose a reservation to settle
    client_gone: bool = False  # the client went away first: cancelled
    upstream_broke: bool = False  # the model server broke its reply
    reported: bool = False  # the token counts are the model server's own (its `usage`)
    watcher: asyncio.Future[None] | None = None  # watch_disconnect, once started
    watch_handle: asyncio.TimerHandle | None = None  # when watch_later starts it
    queue_wait_s: float | None = None  # once it had its turn in the fair queue
    timing: TokenTiming | None = None  # a stream's token arrivals, once it is relayed
    latency: metrics.ModelSeries | None = None  # where they are observed

    def __post_init__(self) -> None:
        self.prompt_tokens = self.prompt_tokens or self.request.prompt_tokens

    @property
    def billable(self) -> bool:
        """Whether the record bills tokens: the server read the prompt, and the client got a
        reply, or part of a stream, or went away after the server had started."""
        status = self.status or 500
        return self.forwarded and (status < 400 or status == CLIENT_GONE or self.stream_started)

    @property
    def used_tokens(self) -> int:
        """What the rate limits and the fair queue are charged: the server's own count, or, where
        it gave none (a request cut short, a server that sends no usage), the whole reservation,
        since the server may have read and generated that much before it stopped."""
        if not self.forwarded:
            return 0
        prompt, completion = self.billed_tokens()
        counted = prompt + completion
        return counted if self.reported else max(counted, self.request.reserved_tokens)

    def billed_tokens(self) -> tuple[int, int]:
        """(prompt, completion) tokens the usage record bills: the server's count, with the
        prompt once per sequence (for `n` > 1 the server reads it once each, and vLLM counts it
        so); for a whole reply the client abandoned (the server's count never came), the
        completion budget, which the server may have generated before the cancel reached it;
        else what was counted."""
        prompt = self.prompt_tokens * self.request.choices
        if (
            not self.reported
            and not self.request.stream
            and self.status == CLIENT_GONE
            and self.forwarded
        ):
            return prompt, self.request.completion_budget
        return prompt, self.completion_tokens


Recorder = Callable[["GatewayRuntime", Exchange], bool]


#: How often the clients of requests in flight are checked for having gone away.
POLL_S = 0.025
#: Where the server's `receive` does not say whether its client has gone (not uvicorn), a
#: request still going after this starts a task that waits for `http.disconnect`: most requests
#: are over sooner and never pay for it; a client that left earlier is noticed at once then.
WATCH_AFTER_S = 0.05


class DisconnectWatch:
    """Notices clients that go away mid-request, and cancels their requests (once past
    admission: a cancel inside the limiter's call could lose a slot it had just been given).

    Under uvicorn, `receive` is its request cycle's bound method, whose `disconnected` flag turns
    true when the connection is lost: one timer checks the flags of every request in flight each
    POLL_S, so a request costs a dict entry, not a task. Elsewhere `watch_later` is the fallback."""

    def __init__(self, poll_s: float = POLL_S) -> None:
        self.poll_s = poll_s
        self._watched: dict[str, tuple[Exchange, Any, asyncio.Task[None]]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, receive: Receive, ex: Exchange, task: asyncio.Task[None]) -> None:
        cycle = getattr(receive, "__self__", None)
        if not isinstance(getattr(cycle, "disconnected", None), bool):
            ex.watch_handle = watch_later(receive, ex, task)
            return
        self._watched[ex.request_id] = (ex, cycle, task)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.poll_s, self._poll)

    def unwatch(self, ex: Exchange) -> None:
        """The request is over."""
        self._watched.pop(ex.request_id, None)
        if ex.watch_handle is not None:
            ex.watch_handle.cancel()
        if ex.watcher is not None:
            ex.watcher.cancel()

    def _poll(self) -> None:
        self._timer = None
        for request_id, (ex, cycle, task) in list(self._watched.items()):
            if cycle.disconnected and not ex.replied:
                del self._watched[request_id]
                ex.client_gone = True
                if ex.cancellable:
                    task.cancel()
        if self._watched:
            self._timer = asyncio.get_running_loop().call_later(self.poll_s, self._poll)


def watch_later(receive: Receive, ex: Exchange, task: asyncio.Task[None]) -> asyncio.TimerHandle:
    """Start `watch_disconnect` for `ex` after WATCH_AFTER_S; cancel the handle (and `ex.watcher`)
    when the request is over."""

    def start() -> None:
        ex.watcher = asyncio.ensure_future(watch_disconnect(receive, ex, task))

    return asyncio.get_running_loop().call_later(WATCH_AFTER_S, start)


async def watch_disconnect(receive: Receive, ex: Exchange, task: asyncio.Task[None]) -> None:
    """Once the body is read, the next ASGI message is `http.disconnect`: when it comes before
    the reply is over, the client went away, and its request task is cancelled (once it is past
    admission: a cancel inside the limiter's call could lose a slot it had just been given)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    if not ex.replied:
        ex.client_gone = True
        if ex.cancellable:
            task.cancel()


async def relay_whole(
    rt: GatewayRuntime,
    ex: Exchange,
    reply: aiohttp.ClientResponse,
    content_type: str,
    send: Send,
    record: Recorder,
) -> None:
    body = await _read_capped(reply, rt.config.max_reply_mib * 1024 * 1024, ex)
    if reply.status == 200:
        usage, body = read_reply(body, ex.request.model)
        if usage is not None:
            (ex.prompt_tokens, ex.completion_tokens), ex.reported = usage, True
    ex.status = reply.status
    if not record(rt, ex):
        raise ApiError(
            ErrorCode.USAGE_UNAVAILABLE,
            "usage could not be recorded, so the reply was withheld; try again later",
            retry_after_s=5,
        )
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", b"%d" % len(body)),
        (b"x-request-id", ex.request_id.encode()),
    ]
    ex.replied = True
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _read_capped(reply: aiohttp.ClientResponse, max_bytes: int, ex: Exchange) -> bytes:
    declared = reply.content_length
    if declared is not None and declared <= max_bytes:
        return await reply.read()  # the common case: aiohttp reads no more than declared
    size = 0
    chunks: list[bytes] = []
    if declared is None:
        async for chunk in reply.content.iter_any():
            size += len(chunk)
            if size > max_bytes:
                break
            chunks.append(chunk)
        else:
            return b"".join(chunks)
    ex.upstream_broke = True
    log.warning("request %s: the model server's reply is over %d bytes", ex.request_id, max_bytes)
    raise ApiError(
        ErrorCode.UPSTREAM_REPLY_TOO_LARGE,
        f"the model server's reply is larger than the gateway takes ({max_bytes // 2**20} MiB)",
    )


async def relay_stream(
    rt: GatewayRuntime,
    ex: Exchange,
    reply: aiohttp.ClientResponse,
    send: Send,
    record: Recorder,
    clock: Clock = SYSTEM_CLOCK,
) -> None:
    """Relay a stream event by event; `clock` (the one `ex.started_s` was read from) times the
    reads that carry tokens: the TTFT is observed as the first token arrives, the gaps (counted
    into buckets as they come) once the stream has ended."""
    timing = ex.timing = TokenTiming(ex.started_s, metrics.ITL_BUCKETS_S)
    latency = ex.latency = metrics.model_series(ex.caller.tenant, ex.request.model)
    try:
        await _relay_events(rt, ex, reply, send, record, clock)
    finally:  # however it ended: the gaps it had
        metrics.observe_counted(latency.inter_token_latency, timing.gap_counts, timing.gaps_total_s)


async def _relay_events(
    rt: GatewayRuntime,
    ex: Exchange,
    reply: aiohttp.ClientResponse,
    send: Send,
    record: Recorder,
    clock: Clock,
) -> None:
    splitter = EventSplitter(rt.config.max_event_kib * 1024)
    usage = StreamUsage()
    renamer = model_renamer(ex.upstream_model, ex.request.model)
    chunks = reply.content.iter_any()
    events: list[bytes] = []
    read_s = 0.0
    try:
        async for chunk in chunks:  # the first whole event before the headers: a 502 is possible
            events = splitter.feed(chunk)
            if events:
                read_s = clock.now_s()
                break
    except EventTooLong:
        raise _event_too_long(rt, ex) from None
    headers = [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache"),
        (b"x-request-id", ex.request_id.encode()),
    ]
    ex.status = 200
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    ex.stream_started = True
    try:
        going = await _pass_on(rt, ex, usage, events, renamer, send, record, read_s)
        async for chunk in chunks:
            if not going:
                return
            events = splitter.feed(chunk)
            if events:
                going = await _pass_on(rt, ex, usage, events, renamer, send, record, clock.now_s())
        rest = splitter.rest()
        if not going or (
            rest and not await _pass_on(rt, ex, usage, [rest], renamer, send, record, clock.now_s())
        ):
            return
    except EventTooLong:
        error = _event_too_long(rt, ex)
        ex.status = error.status
        await _end_with_error(rt, ex, error, send, record)
        return
    except (aiohttp.ClientError, TimeoutError) as broken:  # the server broke off its stream
        ex.upstream_broke = True
        log.warning("request %s: the model server broke off its stream: %r", ex.request_id, broken)
        code = (
            ErrorCode.UPSTREAM_TIMEOUT
            if isinstance(broken, TimeoutError)
            else ErrorCode.BACKEND_UNAVAILABLE
        )
        message = "the model server broke off its reply; what arrived is billed"
        await _end_with_error(rt, ex, ApiError(code, message), send, record)
        return
    _count(ex, usage)
    record(rt, ex)
    ex.replied = True
    await send({"type": "http.response.body", "body": b""})


async def _pass_on(
    rt: GatewayRuntime,
    ex: Exchange,
    usage: StreamUsage,
    events: list[bytes],
    renamer: tuple[bytes, bytes] | None,
    send: Send,
    record: Recorder,
    read_s: float,
) -> bool:
    """Send on whole events that were read at `read_s`, counting and timing their tokens; the
    record is written before the `[DONE]` event goes out. False when the stream had to end there
    (the record could not be written)."""
    before = usage.token_events
    done = -1
    hidden: list[int] = []
    for at, event in enumerate(events):
        if usage.read_event(event) and done < 0:
            done = at
        if usage.usage_only and not ex.request.wants_usage:
            hidden.append(at)  # the gateway asked for it; the client did not
    if hidden:
        if done >= 0:
            done -= sum(1 for at in hidden if at < done)
        events = [event for at, event in enumerate(events) if at not in hidden]
    if usage.token_events != before:
        _tokens_arrived(ex, read_s)
    _count(ex, usage)
    going = done < 0 or record(rt, ex)  # [DONE]: the record first, with every token counted
    if not going:
        events = events[:done]
    if events:
        if renamer is not None:
            events = [rename_model(event, renamer) for event in events]
        body = events[0] if len(events) == 1 else b"".join(events)
        await send({"type": "http.response.body", "body": body, "more_body": True})
    if not going:
        error = ApiError(ErrorCode.USAGE_UNAVAILABLE, "usage could not be recorded")
        await _end_with_error(rt, ex, error, send, record)
    return going


def _count(ex: Exchange, usage: StreamUsage) -> None:
    ex.prompt_tokens, ex.completion_tokens = usage.tokens(ex.request.prompt_tokens)
    ex.reported = usage.reported


def _tokens_arrived(ex: Exchange, read_s: float) -> None:
    """A read at `read_s` carried generated tokens: observe the time to first token, or count
    the gap since the last such read."""
    timing, latency = ex.timing, ex.latency
    if timing is None or latency is None:
        return
    first = timing.first_s is None
    seconds = timing.tokens_at(read_s)
    if first:
        latency.time_to_first_token.observe(seconds)


async def _end_with_error(
    rt: GatewayRuntime, ex: Exchange, error: ApiError, send: Send, record: Recorder
) -> None:
    """End a stream that has started with an OpenAI-style error event (as OpenAI does)."""
    record(rt, ex)
    ex.replied = True
    event = b"data: " + error_body(error.code, error.message) + b"\n\n"
    await send({"type": "http.response.body", "body": event})


def _event_too_long(rt: GatewayRuntime, ex: Exchange) -> ApiError:
    ex.upstream_broke = True
    limit_kib = rt.config.max_event_kib
    log.warning("request %s: the model server sent an event over %d KiB", ex.request_id, limit_kib)
    return ApiError(
        ErrorCode.UPSTREAM_EVENT_TOO_LARGE,
        f"the model server sent a stream event longer than the gateway takes ({limit_kib} KiB)",
    )
