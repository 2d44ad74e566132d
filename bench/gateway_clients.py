"""The upstream-client comparison behind the gateway's choice of aiohttp: a minimal raw-ASGI reverse
proxy that forwards each request (method, path, body, content-type) to one backend and sends the
reply back (whole, or chunk by chunk when it is an event stream), with either an
`aiohttp.ClientSession` or an `httpx.AsyncClient`. Nothing else: no keys, limits, queues or usage,
so the difference between the two is the client's.

    python -m bench.gateway_clients aiohttp --port 8100 --backend http://127.0.0.1:8001

serves it with Granian, 1 worker, uvloop, HTTP/1 (as the gateway is served); bench/gateway.py starts
and stops it. The factories read the backend's URL from the environment the runner exports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx

from gpuplex.settings import environment_value, export_for_workers

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

BACKEND_VARIABLE = "GPUPLEX_BENCH_BACKEND_URL"
MAX_CONNECTIONS = 256  # to the backend; more than the load generators ever hold open


class Reply:
    """One upstream reply as the proxy needs it: status, content type, and the body."""

    def __init__(self, status: int, content_type: str, chunks: AsyncIterator[bytes]) -> None:
        self.status = status
        self.content_type = content_type
        self.chunks = chunks


Forward = Callable[[str, str, bytes, str], AbstractAsyncContextManager[Reply]]
Closer = Callable[[], Awaitable[None]]


class MinimalProxy:
    """Raw ASGI: read the body, forward it, send the reply back."""

    def __init__(self, backend_url: str, opener: Callable[[], Forward], closer: Closer) -> None:
        self.backend_url = backend_url.rstrip("/")
        self._opener = opener
        self._closer = closer
        self._forward: Forward | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._forward = self._opener()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._closer()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._forward is None:  # a server without lifespan support
            self._forward = self._opener()
        body = await _read_body(receive)
        content_type = "application/json"
        for name, value in scope["headers"]:
            if name == b"content-type":
                content_type = bytes(value).decode("latin-1")
        url = f"{self.backend_url}{scope['path']}"
        async with self._forward(scope["method"], url, body, content_type) as reply:
            headers: Headers = [(b"content-type", reply.content_type.encode("latin-1"))]
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            async for chunk in reply.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _one(body: bytes) -> AsyncIterator[bytes]:
    async def once() -> AsyncIterator[bytes]:
        yield body

    return once()


def _backend_url() -> str:
    url = environment_value(BACKEND_VARIABLE)
    if not url:
        raise RuntimeError(f"set {BACKEND_VARIABLE} (python -m bench.gateway_clients does)")
    return url


def aiohttp_app() -> MinimalProxy:
    """The factory Granian calls: the proxy with an aiohttp client (the gateway's settings)."""
    holder: list[aiohttp.ClientSession] = []

    def opener() -> Forward:
        connector = aiohttp.TCPConnector(
            limit=MAX_CONNECTIONS, keepalive_timeout=30, ttl_dns_cache=300
        )
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        holder.append(session)

        @asynccontextmanager
        async def forward(
            method: str, url: str, body: bytes, content_type: str
        ) -> AsyncIterator[Reply]:
            async with session.request(
                method, url, data=body, headers={"content-type": content_type}
            ) as reply:
                kind = reply.headers.get("content-type", "application/json")
                if "event-stream" in kind:
                    yield Reply(reply.status, kind, reply.content.iter_any())
                else:
                    yield Reply(reply.status, kind, _one(await reply.read()))

        return forward

    async def closer() -> None:
        for session in holder:
            await session.close()

    return MinimalProxy(_backend_url(), opener, closer)


def httpx_app() -> MinimalProxy:
    """The factory Granian calls: the same proxy with an httpx client."""
    holder: list[httpx.AsyncClient] = []

    def opener() -> Forward:
        client = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=MAX_CONNECTIONS,
                max_keepalive_connections=MAX_CONNECTIONS,
                keepalive_expiry=30,
            ),
            timeout=httpx.Timeout(300, connect=5),
        )
        holder.append(client)

        @asynccontextmanager
        async def forward(
            method: str, url: str, body: bytes, content_type: str
        ) -> AsyncIterator[Reply]:
            request = client.build_request(
                method, url, content=body, headers={"content-type": content_type}
            )
            reply = await client.send(request, stream=True)
            try:
                kind = reply.headers.get("content-type", "application/json")
                if "event-stream" in kind:
                    yield Reply(reply.status_code, kind, reply.aiter_raw())
                else:
                    yield Reply(reply.status_code, kind, _one(await reply.aread()))
            finally:
                await reply.aclose()

        return forward

    async def closer() -> None:
        for client in holder:
            await client.aclose()

    return MinimalProxy(_backend_url(), opener, closer)


FACTORIES = {"aiohttp": "aiohttp_app", "httpx": "httpx_app"}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("client", choices=sorted(FACTORIES))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", required=True, help="the backend's base URL")
    args = parser.parse_args(argv)
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces, Loops

    export_for_workers({BACKEND_VARIABLE: args.backend})
    Granian(
        f"bench.gateway_clients:{FACTORIES[args.client]}",
        factory=True,
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.ASGI,
        workers=1,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        log_access=False,
        backlog=2048,
        working_dir=Path(__file__).resolve().parent.parent,
    ).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
