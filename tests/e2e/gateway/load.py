"""Load for the gateway's end-to-end tests: many concurrent clients with aiohttp, each reply kept
with its status, tokens, latency and request id."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import orjson


@dataclass(frozen=True, slots=True)
class Reply:
    tenant: str
    status: int
    tokens: int
    latency_s: float
    done_at_s: float  # time.monotonic() when the reply was complete
    request_id: str
    retry_after_s: float | None = None


def chat_body(model: str, max_tokens: int, prompt: str = "x" * 40) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
        }
    )


async def call(
    session: aiohttp.ClientSession, url: str, key: str, tenant: str, body: bytes
) -> Reply:
    started = time.monotonic()
    async with session.post(
        f"{url}/v1/chat/completions",
        data=body,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    ) as response:
        payload = await response.read()
        done = time.monotonic()
        tokens = 0
        if response.status == 200:
            usage = orjson.loads(payload)["usage"]
            tokens = usage["prompt_tokens"] + usage["completion_tokens"]
        retry = response.headers.get("retry-after")
        return Reply(
            tenant,
            response.status,
            tokens,
            done - started,
            done,
            response.headers.get("x-request-id", ""),
            float(retry) if retry else None,
        )


async def closed_loop(
    url: str,
    key: str,
    tenant: str,
    clients: int,
    duration_s: float,
    body: Callable[[int], bytes],
    respect_retry_after: bool = True,
    stop_on_429: bool = False,
) -> list[Reply]:
    """`clients` clients, each sending its next request when the last one is answered, until
    `duration_s` passes or, with `stop_on_429`, until the client's first 429."""
    replies: list[Reply] = []
    end = time.monotonic() + duration_s
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_client(n: int) -> None:
            i = 0
            while time.monotonic() < end:
                try:
                    reply = await call(session, url, key, tenant, body(n * 1_000_000 + i))
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
                    continue
                replies.append(reply)
                i += 1
                if reply.status == 429 and stop_on_429:
                    return
                if reply.status == 429 and respect_retry_after:
                    wait = min(reply.retry_after_s or 1.0, max(0.0, end - time.monotonic()))
                    await asyncio.sleep(wait)

        await asyncio.gather(*(one_client(n) for n in range(clients)))
    return replies


async def open_loop(
    url: str, key: str, tenant: str, rate_per_s: float, duration_s: float, body: bytes
) -> list[Reply]:
    """Requests at a fixed rate whatever the answers (a flood), at most 512 outstanding."""
    replies: list[Reply] = []
    outstanding = asyncio.Semaphore(512)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            try:
                replies.append(await call(session, url, key, tenant, body))
            except aiohttp.ClientError:
                pass
            finally:
                outstanding.release()

        tasks: list[asyncio.Task[None]] = []
        start = time.monotonic()
        sent = 0
        while (now := time.monotonic()) < start + duration_s:
            due = int((now - start) * rate_per_s)
            while sent < due:
                await outstanding.acquire()
                tasks.append(asyncio.create_task(one()))
                sent += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)
    return replies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def flood_statuses(
    url: str, key: str, tenant: str, rate_per_s: float, duration_s: float, body: bytes
) -> list[int]:
    """`open_loop` in a process of its own (so its load does not slow the caller's clients down);
    returns the statuses it got."""
    replies = asyncio.run(open_loop(url, key, tenant, rate_per_s, duration_s, body))
    return [reply.status for reply in replies]
