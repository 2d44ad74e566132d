"""The HTTP front door of gpuplex's servers (the gateway and the control plane): uvicorn's
httptools protocol with the limits it lacks, so that no client, key or no key, can take the
process's memory, file descriptors or connections.

- The request line, the header bytes and the number of headers are bounded while they are read:
  past a limit the client gets 414 or 431 and the connection closes; the rest is never buffered.
- A request head must arrive within `header_timeout_s` of the connection opening (or of the first
  byte of a later request on a kept-alive connection): idle and slowloris connections are closed
  (with 408 when part of a head came). A kept-alive connection idle `keep_alive_timeout_s` after
  an answer is closed.
- At most `max_connections_per_client` connections per client address (IPv6: per /64) and
  `max_connections` in all, per process. Past the per-address cap a new connection is answered
  503 and closed at once; at the total cap the oldest connection that is waiting for a request
  head is closed to make room, and only when none is waiting is the new one refused.
- An answer sent before the request's body was read (401, 413) or to a head over a limit is
  followed by a lingering close: the answer and a FIN go out, up to `LINGER_BYTES` of what still
  comes is read and dropped unparsed (so a client that was finishing a small body reads the answer
  and closes cleanly), then reading stops, and the connection closes `LINGER_S` after the answer.
  A client that keeps pushing is throttled to what the kernel buffers, never read.
- An HTTP/1.0 client gets its reply without chunked encoding: with its Content-Length, or ending
  where the connection closes.

uvicorn's own options do not cover this: `limit_concurrency` answers 503 only after reading a
whole head, httptools keeps every header (and appends a long one to itself, quadratically), and
the keep-alive timer only starts after a first answer. Error bodies are JSON in the caller's own
format (`ErrorBody`, in gpuplex/http_limits.py), each with a code from gpuplex/error_codes.py and
the status that code carries.

A head's bytes are counted as they are read; a pipelined head that begins in the same read as the
end of the previous request is counted from the next read on (at most one read, 256 KiB, more).
The header count and the request line are counted exactly.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from typing import Any, cast

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gpuplex.errors import ErrorCode
from gpuplex.http_limits import (
    ErrorBody,
    HttpLimits,
    client_key,
    plain_error_body,
    reply_bytes,
)

#: After an early answer: how much of what the client still sends is read and dropped, and when
#: the connection is closed.
LINGER_S = 2.0
LINGER_BYTES = 256 * 1024


def uvicorn_options(limits: HttpLimits, error_body: ErrorBody = plain_error_body) -> dict[str, Any]:
    """The `uvicorn.run` / `uvicorn.Config` arguments that put the front door in place. The
    protocol factory pickles (a partial of module-level names), so `workers > 1` can use it."""
    factory = functools.partial(GuardedHttpProtocol, limits=limits, error_body=error_body)
    return {
        "http": cast("type[asyncio.Protocol]", factory),
        "ws": "none",  # neither server speaks WebSocket: an upgrade is an ordinary request
        "timeout_keep_alive": limits.keep_alive_timeout_s,
    }


class ConnectionRegistry:
    """The open connections of one uvicorn server: counted in all and per client address, and,
    oldest first, those that wait for a request head (the ones closed to make room)."""

    def __init__(self) -> None:
        self.open = 0
        self.by_client: dict[str, int] = {}
        self.waiting: dict[GuardedHttpProtocol, None] = {}  # insertion order: oldest first

    def admit(self, connection: GuardedHttpProtocol, limits: HttpLimits) -> str | None:
        """None when `connection` may stay (after closing the oldest waiting one where the total
        cap is reached); else why not."""
        key = connection.client_key
        if self.by_client.get(key, 0) >= limits.max_connections_per_client:
            return f"too many connections from this address (at most {limits.max_connections_per_client})"
        if self.open >= limits.max_connections:
            oldest = next(iter(self.waiting), None)
            if oldest is None:
                return "the server is at its connection limit; retry shortly"
            oldest.evict()
        self.open += 1
        self.by_client[key] = self.by_client.get(key, 0) + 1
        connection.counted = True
        return None

    def release(self, connection: GuardedHttpProtocol) -> None:
        self.waiting.pop(connection, None)
        if not connection.counted:
            return
        connection.counted = False
        self.open -= 1
        key = connection.client_key
        left = self.by_client.get(key, 1) - 1
        if left > 0:
            self.by_client[key] = left
        else:
            self.by_client.pop(key, None)


_REGISTRIES: weakref.WeakKeyDictionary[ServerState, ConnectionRegistry] = (
    weakref.WeakKeyDictionary()
)


def registry_of(server_state: ServerState) -> ConnectionRegistry:
    registry = _REGISTRIES.get(server_state)
    if registry is None:
        registry = _REGISTRIES[server_state] = ConnectionRegistry()
    return registry


class _Refused(Exception):
    """Raised from a parser callback: the head broke a limit."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol behind the limits of `HttpLimits` (see the module's text)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: HttpLimits,
        error_body: ErrorBody = plain_error_body,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.error_body = error_body
        self.registry = registry_of(server_state)
        self.client_key = ""
        self.counted = False  # by the registry
        self.head_open = True  # the next bytes belong to a request head
        self.head_bytes = 0
        self.url_bytes = 0
        self.header_count = 0
        self.head_timer: asyncio.TimerHandle | None = None
        self.head_deadline: float | None = None  # loop time; None while no head is being read
        self.lingering = False
        self.dropped_bytes = 0
        self.linger_timer: asyncio.TimerHandle | None = None

    # connections: admitted, counted, timed out, evicted

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.client_key = client_key(self.client)
        why_not = self.registry.admit(self, self.limits)
        if why_not is not None:
            transport.write(reply_bytes(self.error_body, ErrorCode.TOO_MANY_CONNECTIONS, why_not))
            transport.close()
            return
        self.registry.waiting[self] = None
        self._expect_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self.registry.release(self)
        super().connection_lost(exc)

    def evict(self) -> None:
        """Close this waiting connection to make room for a new one."""
        self._cancel_timers()
        self.registry.release(self)
        self.transport.close()

    def _cancel_timers(self) -> None:
        for timer in (self.head_timer, self.linger_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.linger_timer = None

    def _expect_head(self) -> None:
        """A request head must now arrive within the header timeout. The timer is armed once and
        re-armed lazily when it fires early (a head that came in time moved the deadline), so a
        kept-alive connection costs no timer per request."""
        self.head_deadline = self.loop.time() + self.limits.header_timeout_s
        if self.head_timer is None:
            self.head_timer = self.loop.call_at(self.head_deadline, self._head_timed_out)

    def _head_timed_out(self) -> None:
        self.head_timer = None
        deadline = self.head_deadline
        if self.transport.is_closing() or deadline is None:
            return  # no head is being read: the next one arms the timer again
        if deadline > self.loop.time():
            self.head_timer = self.loop.call_at(deadline, self._head_timed_out)
            return
        answering = self.cycle is not None and not self.cycle.response_complete
        if (self.head_bytes or self.url_bytes) and not answering:
            message = f"the request head did not arrive within {self.limits.header_timeout_s:g} s"
            self.transport.write(reply_bytes(self.error_body, ErrorCode.HEADER_TIMEOUT, message))
        self.transport.close()

    # reading: the head bounded in bytes, then the parser

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self.dropped_bytes += len(data)
            if self.dropped_bytes > LINGER_BYTES:
                self.flow.pause_reading()  # the rest stays in the kernel until the close
            return
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        most = self.limits.max_header_bytes
        if not self.head_open or self.head_bytes + len(data) < most:
            # the common case: a body, or a whole request well inside the limit, in one read
            self.head_bytes += len(data) if self.head_open else 0
            self._feed(data)
            return
        view = memoryview(data)
        while view:
            if not self.head_open:
                self._feed(view)
                return
            room = most - self.head_bytes
            part, view = view[:room], view[room:]
            self.head_bytes += len(part)
            if not self._feed(part):
                return
            if view and self.head_open and self.head_bytes >= most:
                self._refuse(ErrorCode.HEADERS_TOO_LARGE, f"the request head is over {most} bytes")
                return

    def _feed(self, data: bytes | memoryview) -> bool:
        """Parse `data`; False when the connection is being refused or closed."""
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as error:
            if isinstance(error.__context__, _Refused):
                self._refuse(error.__context__.code, error.__context__.message)
            else:
                self._refuse(ErrorCode.INVALID_HTTP, "invalid HTTP request", linger=False)
            return False
        except httptools.HttpParserError:
            self._refuse(ErrorCode.INVALID_HTTP, "invalid HTTP request", linger=False)
            return False
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            # else the request is answered as plain HTTP (uvicorn would log a warning each time)
            return False
        return not self.transport.is_closing()

    def _refuse(self, code: ErrorCode, message: str, *, linger: bool = True) -> None:
        self._cancel_timers()
        self.registry.waiting.pop(self, None)
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # a pipelined head broke a limit while an answer is made
            return
        self.transport.write(reply_bytes(self.error_body, code, message))
        if linger:
            self._linger()
        else:
            self.transport.close()

    def _linger(self) -> None:
        """Send FIN after the answer, drop what still comes, and close soon."""
        self.lingering = True
        self._unset_keepalive_if_required()
        self.head_deadline = None
        self.registry.waiting[self] = None  # may be closed to make room
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.flow.resume_reading()
        self.linger_timer = self.loop.call_later(LINGER_S, self.transport.close)

    # parser callbacks: counted against the limits, then uvicorn's

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.url_bytes = 0
        self.header_count = 0
        if self.head_deadline is None:  # a later request on a kept-alive connection
            self._expect_head()

    def on_url(self, url: bytes) -> None:
        self.url_bytes += len(url)
        if self.url_bytes > self.limits.max_request_line_bytes:
            most = self.limits.max_request_line_bytes
            raise _Refused(
                ErrorCode.REQUEST_LINE_TOO_LONG, f"the request target is over {most} bytes"
            )
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > self.limits.max_headers:
            most = self.limits.max_headers
            raise _Refused(ErrorCode.TOO_MANY_HEADERS, f"a request may have at most {most} headers")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.head_open = False
        self.head_deadline = None
        self.registry.waiting.pop(self, None)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope and self.scope["http_version"] == "1.0":
            cycle.__class__ = Http10Cycle  # same state, a send that never chunks

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.head_open = True
        self.head_bytes = 0

    def on_response_complete(self) -> None:
        cycle = self.cycle
        body_unread = (
            cycle is not None and cycle.response_complete and cycle.more_body and not self.pipeline
        )
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing() or self.lingering:
            return
        if body_unread:  # answered before the body was read (401, 413): never read the rest
            self._linger()
        elif not pipelined:
            self.registry.waiting[self] = None  # kept alive, waiting for the next head


class Http10Cycle(RequestResponseCycle):
    """A request/response cycle for an HTTP/1.0 client, which cannot read chunked encoding: a
    reply without Content-Length ends where the connection closes (uvicorn never keeps an
    HTTP/1.0 connection alive)."""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {bytes(name).lower() for name, _ in message.get("headers", [])}
            status = int(message["status"])
            if (
                b"content-length" not in names
                and b"transfer-encoding" not in names
                and self.scope["method"] != "HEAD"
                and status not in (204, 304)
            ):
                self.chunked_encoding = False  # uvicorn then adds neither framing header
                self.__dict__["close_delimited"] = True
        elif (
            message["type"] == "http.response.body"
            and self.__dict__.get("close_delimited")
            and not self.response_complete
        ):
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)
