"""The few ASGI moves the gateway makes: read a bounded body within a deadline, send a whole reply.
Plain ASGI (no framework) on the hot path: the gateway's benchmark chose it (docs/benchmarks.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gpuplex.errors import ErrorCode
from gpuplex.gateway.api_errors import ApiError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def read_body(scope: Scope, receive: Receive, max_bytes: int, timeout_s: float) -> bytes:
    """The request body, refused with 413 past `max_bytes` (before reading it when the
    Content-Length says so) and with 408 when it does not all arrive within `timeout_s`."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ApiError(ErrorCode.REQUEST_TIMEOUT, "the client went away mid-request")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > max_bytes:
                    raise _too_large(max_bytes)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
    except TimeoutError:
        raise ApiError(
            ErrorCode.REQUEST_TIMEOUT, f"the request body did not arrive within {timeout_s:g} s"
        ) from None
    return b"".join(chunks)


def _too_large(max_bytes: int) -> ApiError:
    return ApiError(
        ErrorCode.REQUEST_TOO_LARGE, f"the request body is larger than {max_bytes // 1024} KiB"
    )


async def send_reply(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": headers or JSON_HEADERS}
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, value: object) -> None:
    await send_reply(send, status, orjson.dumps(value))


async def send_error(send: Send, error: ApiError) -> None:
    await send_reply(send, error.status, error.body(), error.headers())
