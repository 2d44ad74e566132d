"""gpuplex's HTTP client for everything but the gateway's proxying: the CLI's calls to the control
plane, the identity provider's discovery documents, keys and token endpoints, budget webhooks, DCGM
exporters, and `gpuplex up`'s readiness checks.

It is aiohttp, the client the gateway measured fastest on its hot path (docs/benchmarks.md), so
gpuplex has one HTTP stack; this module gives the callers that are not asynchronous (commands,
worker threads) a blocking call. Every answer is bounded: in time (a stall on connect or read,
`timeout_s`, and the whole exchange, `deadline_s`) and in size (`max_bytes`).

A call that cannot be had (refused, reset, a stall, the deadline) raises OSError, as the standard
library does: ConnectionError or TimeoutError, saying what and where. Any HTTP status is an answer.
Environment proxies ($HTTPS_PROXY, $NO_PROXY) are honoured only where a caller asks (the CLI, as
curl would); the servers' own calls never go through one. aiohttp is loaded by the first call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import aiohttp

#: The most an answer may hold unless a caller says otherwise.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """What the server answered. `complete` is False when the body went past `max_bytes`: then
    `body` holds the first `max_bytes` + 1 bytes and the rest was not read."""

    status: int
    body: bytes
    complete: bool = True

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; {} when it is not one."""
        try:
            data = json.loads(self.body)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str
    timeout_s: float  # the longest stall, connecting or between reads
    deadline_s: float | None  # the longest the whole exchange may take
    headers: Mapping[str, str]
    body: bytes | None
    max_bytes: int
    follow_redirects: bool
    environment_proxy: bool


def call(
    method: str,
    url: str,
    *,
    timeout_s: float,
    deadline_s: float | None = None,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    follow_redirects: bool = True,
    environment_proxy: bool = False,
) -> HttpAnswer:
    """One request, waited for; for threads and commands (never inside a running event loop)."""
    import asyncio  # loaded by the first call: `gpuplex --help` needs no event loop

    request = HttpRequest(
        method,
        url,
        timeout_s,
        deadline_s,
        {"Accept-Encoding": "identity", **(headers or {})},
        body,
        max_bytes,
        follow_redirects,
        environment_proxy,
    )
    return asyncio.run(_exchange(request))


async def _exchange(request: HttpRequest) -> HttpAnswer:
    """One request on a connection of its own, closed after it. Bodies come as sent (identity
    encoding asked for, nothing decompressed), so `max_bytes` bounds what is held."""
    import aiohttp  # loaded by the first call, not by every process that imports this module

    url, timeout_s, deadline_s = request.url, request.timeout_s, request.deadline_s
    timeout = aiohttp.ClientTimeout(total=deadline_s, sock_connect=timeout_s, sock_read=timeout_s)
    try:
        async with (
            aiohttp.ClientSession(
                timeout=timeout, trust_env=request.environment_proxy, auto_decompress=False
            ) as session,
            session.request(
                request.method,
                url,
                headers=dict(request.headers),
                data=request.body,
                allow_redirects=request.follow_redirects,
            ) as reply,
        ):
            read, complete = await _bounded_body(reply.content, request.max_bytes)
            return HttpAnswer(reply.status, read, complete)
    except TimeoutError:
        limit = f"a stall over {timeout_s:g} s"
        if deadline_s is not None:
            limit += f", or over {deadline_s:g} s in all"
        raise TimeoutError(f"{url}: timed out ({limit})") from None
    except (aiohttp.ClientError, ValueError) as error:  # ValueError: a URL aiohttp cannot use
        reason = _reason(error)
        raise ConnectionError(
            f"{url}: {'not an http(s) URL' if reason == url else reason}"
        ) from None


async def _bounded_body(stream: aiohttp.StreamReader, max_bytes: int) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    held = 0
    async for chunk in stream.iter_chunked(_CHUNK):
        parts.append(chunk)
        held += len(chunk)
        if held > max_bytes:
            return b"".join(parts)[: max_bytes + 1], False
    return b"".join(parts), True


def _reason(error: BaseException) -> str:
    """What went wrong, in the words of the cause where aiohttp wraps one (refused, unknown
    host), without aiohttp's class names."""
    cause = getattr(error, "os_error", None) or error.__cause__ or error
    number = getattr(cause, "errno", None)
    if isinstance(number, int) and number > 0:  # "Connection refused", not asyncio's wording
        return os.strerror(number)
    return getattr(cause, "strerror", None) or str(cause) or type(error).__name__
