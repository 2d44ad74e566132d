"""A gateway that follows the store's applied revision takes a new one under load: a lower
tokens_per_min and a route moved to another model server, with no request failed and both in
force within a second of the apply (FOLLOW_INTERVAL_S plus one store query)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import aiohttp
import httpx
import pytest

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.server.context import ServerContext
from gpuplex.server.spec_apply import apply
from gpuplex.store.db import open_store
from tests.e2e.gateway.load import chat_body
from tests.e2e.gateway.stack import Gateway, Stack, free_port, stack

__all__ = ["stack"]

pytestmark = [pytest.mark.slow, pytest.mark.lane]

SPEC = """
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 2}}]}}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    rate_limits: {{tokens_per_min: {acme_tpm}}}
    workloads:
      - name: chat
        gpu: {{memory_gib: 20}}
        serve: {{model: llm, port: 9100}}
  - name: globex
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {{memory_gib: 20}}
        serve: {{model: llm, port: 9200}}
gateway:
  port: {gateway_port}
  backends:
    acme/chat: ["http://127.0.0.1:{acme_port}"]
    globex/chat: ["http://127.0.0.1:{globex_port}"]
"""

#: How long after the apply the new revision must be in force in the gateway.
IN_FORCE_WITHIN_S = 1.0
CLIENTS_PER_TENANT = 6


@dataclass
class Sent:
    tenant: str
    started_s: float
    status: int | None  # None: no HTTP answer at all
    error: str = ""


@dataclass
class Load:
    sent: list[Sent] = field(default_factory=list)


async def _clients(url: str, keys: dict[str, str], duration_s: float, load: Load) -> None:
    end = time.monotonic() + duration_s
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one_client(tenant: str, n: int) -> None:
            i = 0
            while time.monotonic() < end:
                started = time.monotonic()
                body = chat_body("llm", 20, prompt=f"client {n} request {i}")
                headers = {"authorization": f"Bearer {keys[tenant]}"}
                try:
                    async with session.post(
                        f"{url}/v1/chat/completions", data=body, headers=headers
                    ) as reply:
                        await reply.read()
                        load.sent.append(Sent(tenant, started, reply.status))
                except aiohttp.ClientError as error:
                    load.sent.append(Sent(tenant, started, None, repr(error)))
                i += 1

        await asyncio.gather(*(one_client(t, n) for t in keys for n in range(CLIENTS_PER_TENANT)))


def _requests_served(port: int) -> int:
    stats = httpx.get(f"http://127.0.0.1:{port}/sim/stats", timeout=5).json()
    return sum(stats["requests"].values())


def test_a_new_revision_takes_effect_under_load_within_a_second(stack: Stack) -> None:
    acme_port = stack.sim(["llm"], decode_ms_per_token=1)
    first_globex, second_globex = stack.sim(["llm"]), stack.sim(["llm"])
    gateway_port = free_port()

    def spec(acme_tpm: int, globex_port: int) -> str:
        return SPEC.format(
            acme_tpm=acme_tpm,
            gateway_port=gateway_port,
            acme_port=acme_port,
            globex_port=globex_port,
        )

    engine = open_store(stack.store_url)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK)
    first, _ = apply(ctx.spec_history, spec(10_000_000, first_globex), 0, actor="test")
    keys = {tenant: stack.key(tenant) for tenant in ("acme", "globex")}
    # no --config: the gateway serves the store's applied revision and follows new ones
    gateway = Gateway(None, stack.store_url, stack.tmp / "spool", gateway_port)
    stack.gateways.append(gateway)
    gateway.start()

    load = Load()
    runner = threading.Thread(
        target=asyncio.run, args=(_clients(gateway.url, keys, 4.0, load),), daemon=True
    )
    runner.start()
    time.sleep(1.5)
    applied_s = time.monotonic()
    apply(ctx.spec_history, spec(500, second_globex), first.revision, actor="test")
    time.sleep(IN_FORCE_WITHIN_S)
    served_by_first_then = _requests_served(first_globex)
    runner.join(30)
    assert not runner.is_alive()

    failed = [s for s in load.sent if s.status not in (200, 429)]
    assert not failed, f"{len(failed)} requests failed, e.g. {failed[:3]}\n{gateway.log()}"
    acme = [s for s in load.sent if s.tenant == "acme"]
    before = [s for s in acme if s.started_s < applied_s]
    assert before
    assert all(s.status == 200 for s in before), "the old limit was not in force"
    late = [s for s in acme if s.started_s >= applied_s + IN_FORCE_WITHIN_S]
    assert late, "no acme request was sent after the change had to be in force"
    assert all(s.status == 429 for s in late), (
        f"{sum(s.status == 200 for s in late)} of {len(late)} acme requests sent more than "
        f"{IN_FORCE_WITHIN_S} s after the apply got past the new tokens_per_min"
    )
    min(s.started_s for s in acme if s.status == 429)

    globex = [s for s in load.sent if s.tenant == "globex"]
    assert globex
    assert all(s.status == 200 for s in globex)
    # the route moved: the old server gets nothing sent after the change was in force
    assert _requests_served(first_globex) == served_by_first_then
    assert _requests_served(second_globex) > 0
    assert "serving revision 2" in gateway.log()
    engine.dispose()
