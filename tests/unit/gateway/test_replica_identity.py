"""The gateway's check that what answers on a replica's address is that replica: the verdict on one
connection (pure), and the connector on real loopback connections, where it refuses before a byte
of the request is sent, checks a pooled connection once, and reads the published identities again
before refusing one whose owner it did not expect."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from gpuplex.errors import StoreError
from gpuplex.gateway.replica_identity import (
    MIN_REREAD_S,
    IdentityCheckingConnector,
    ReplicaIdentityCheck,
    ReplicaIdentityRefused,
    expected_owners,
    verdict,
)
from gpuplex.gateway.socket_owners import Address
from gpuplex.store.replica_identities import ReplicaIdentity
from tests.clocks import ManualClock
from tests.ports import free_port

GATEWAY = ("127.0.0.1", 40000)
REPLICA = ("127.0.0.1", 8000)


def identity(port: int, uid: int | None, node: str = "box") -> ReplicaIdentity:
    return ReplicaIdentity(node, "acme", "chat", 0, port, uid)


def test_expected_owners_by_port() -> None:
    owners = expected_owners(
        [identity(8000, 1001), identity(8001, None), identity(8000, 1002, "n2")]
    )
    assert owners == {8000: frozenset({1001, 1002}), 8001: frozenset({None})}


@pytest.mark.parametrize(
    ("peer", "owner", "expected", "refused"),
    [
        (REPLICA, 1001, frozenset({1001}), False),  # the replica's own user
        (REPLICA, 1002, frozenset({1001}), True),  # another tenant's user on its port
        (REPLICA, 0, frozenset({1001}), True),  # even root
        (REPLICA, 1001, None, False),  # nobody vouches for this port: not checked
        (REPLICA, None, frozenset({1001}), True),  # loopback, yet no socket of this host
        (("::1", 8000), None, frozenset({1001}), True),
        (("10.0.0.7", 8000), None, frozenset({1001}), False),  # another machine: not ours to read
        (("10.0.0.7", 8000), 1002, frozenset({1001}), True),  # this host's own address
        (REPLICA, 1001, frozenset({None}), True),  # published with no user: nothing is taken
    ],
)
def test_the_verdict_on_one_connection(
    peer: Address, owner: int | None, expected: frozenset[int | None] | None, refused: bool
) -> None:
    why = verdict(GATEWAY, peer, owner, expected)
    assert (why is not None) is refused
    if why is not None and owner is not None:
        assert f"uid {owner}" in why


class Published:
    """The store's answers, as the host publishes them: changed by the test; counts reads."""

    def __init__(self, identities: list[ReplicaIdentity]) -> None:
        self.identities = identities
        self.reads = 0
        self.fails = False

    def __call__(self) -> list[ReplicaIdentity]:
        self.reads += 1
        if self.fails:
            raise StoreError("the store is away")
        return list(self.identities)


class Owners:
    """Socket owners as the kernel's tables would name them: a fixed uid; counts look-ups."""

    def __init__(self, uid: int | None) -> None:
        self.uid = uid
        self.calls = 0

    async def __call__(self, ours: Address, peer: Address) -> int | None:
        self.calls += 1
        return self.uid


@asynccontextmanager
async def replica(seen: list[str]) -> AsyncIterator[int]:
    """A server on loopback that records each request it is sent."""

    async def answer(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path}")
        return web.json_response({"usage": {"prompt_tokens": 900_000}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def session_for(check: ReplicaIdentityCheck) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=IdentityCheckingConnector(check, limit=0))


def run(test: Callable[[], object]) -> None:
    asyncio.run(test())  # type: ignore[arg-type]


def test_a_stranger_on_the_replicas_port_is_sent_nothing_and_a_pooled_replica_checked_once() -> (
    None
):
    async def scenario() -> None:
        seen: list[str] = []
        async with replica(seen) as port:
            published = Published([identity(port, 4242)])  # the replica runs as uid 4242
            owners = Owners(os.geteuid())  # ... but this process answers there
            clock = ManualClock()
            check = ReplicaIdentityCheck(published, owners, clock)
            check.load()
            clock.advance(MIN_REREAD_S)  # a refusal now reads the store again first
            async with await session_for(check) as session:
                with pytest.raises(ReplicaIdentityRefused, match="not by the replica"):
                    await session.post(f"http://127.0.0.1:{port}/v1/chat/completions", json={})
                assert seen == []  # not a byte of the request
                assert published.reads == 2  # read again before refusing

                published.identities = [identity(port, os.geteuid())]
                clock.advance(MIN_REREAD_S)  # the next refusal reads again
                for _ in range(3):
                    async with session.get(f"http://127.0.0.1:{port}/health") as reply:
                        assert reply.status == 200
                assert seen == ["GET /health"] * 3
                assert owners.calls == 2  # once for the refused one, once for the pooled one

    run(scenario)


def test_with_the_real_socket_tables_this_processs_server_is_told_apart() -> None:
    async def scenario() -> None:
        seen: list[str] = []
        async with replica(seen) as port:
            published = Published([identity(port, os.geteuid() + 1)])
            clock = ManualClock()
            check = ReplicaIdentityCheck(published, clock=clock)  # the kernel's tables
            check.load()
            async with await session_for(check) as session:
                with pytest.raises(ReplicaIdentityRefused, match=f"uid {os.geteuid()}"):
                    await session.get(f"http://127.0.0.1:{port}/health")
                published.identities = [identity(port, os.geteuid())]
                clock.advance(MIN_REREAD_S)
                async with session.get(f"http://127.0.0.1:{port}/health") as reply:
                    assert reply.status == 200
        assert seen == ["GET /health"]

    run(scenario)


def test_a_port_nobody_published_is_not_checked_and_a_store_away_keeps_what_was_read() -> None:
    async def scenario() -> None:
        seen: list[str] = []
        async with replica(seen) as port:
            published = Published([identity(port + 1, 4242)])
            owners = Owners(os.geteuid())
            check = ReplicaIdentityCheck(published, owners)
            check.load()
            published.fails = True
            check.load()  # logged; what was read stays
            assert check.owners == {port + 1: frozenset({4242})}
            session = await session_for(check)
            async with session, session.get(f"http://127.0.0.1:{port}/health") as reply:
                assert reply.status == 200
            assert owners.calls == 0

    run(scenario)
