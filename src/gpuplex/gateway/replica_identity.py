"""The gateway talks to a replica only if what answers on its address is that replica: for each new
connection to a replica on this host, the owner of the server's end of that very connection
(gateway/socket_owners.py: the kernel's socket diagnostics, or its socket tables) must be the Unix
user the host runtime runs the replica as, which the host publishes in the store
(store/replica_identities.py). A process of another user that took
the port (another tenant's workload, while the replica restarted) is refused: the connection is
closed before a byte of the request is sent, the replica counts a failure, the client gets 503
`backend_unavailable`, and nothing is billed. It is logged once per address and owner.

Connections are pooled, so the check runs once per new connection (`IdentityCheckingConnector`,
on the forwarding client and the health checks' own), not per request. What it cannot check:
a replica with no published identity (one no host runtime of this store runs: a server the
operator started, a container, whose socket the engine's proxy owns), a replica on another
machine (the socket tables are this host's; on Kubernetes, network policies keep tenants
apart), and tenants sharing a user (gpuplex not running as root runs every replica as itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import aiohttp

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.errors import GpuplexError
from gpuplex.gateway.socket_owners import Address, is_loopback, socket_owner
from gpuplex.store.replica_identities import ReplicaIdentity

log = logging.getLogger(__name__)

#: How often the published identities are read again; a connection whose owner is not the one
#: expected reads them at once (at most once per `MIN_REREAD_S`) before it is refused.
REFRESH_INTERVAL_S = 1.0
MIN_REREAD_S = 0.25

#: Who may own the server's end of a connection to each port: None in the set when a host
#: published the replica without a user it can vouch for (nothing is taken then).
ExpectedOwners = Mapping[int, frozenset[int | None]]


class ReplicaIdentityRefused(aiohttp.ClientConnectionError):
    """What answered on a replica's address is not the replica: the connection was closed
    before anything was sent (the proxy answers 503 `backend_unavailable`)."""


def expected_owners(identities: Collection[ReplicaIdentity]) -> dict[int, frozenset[int | None]]:
    """Port -> the uids its replicas run as (one, unless several nodes publish the same port)."""
    owners: dict[int, set[int | None]] = {}
    for identity in identities:
        owners.setdefault(identity.port, set()).add(identity.uid)
    return {port: frozenset(uids) for port, uids in owners.items()}


def verdict(
    ours: Address, peer: Address, owner: int | None, expected: frozenset[int | None] | None
) -> str | None:
    """Why a connection from `ours` to `peer`, whose far end `owner` owns (None: no socket of
    this host), must not be used; None when it may. Pure."""
    if expected is None:
        return None  # no host runtime vouches for anything on this port: nothing to check
    if owner is None:
        if is_loopback(peer[0]):
            return f"no socket on this host answers {_shown(peer)}"
        return None  # on another machine: its socket tables are not ours to read
    if owner in expected:
        return None
    wanted = ", ".join(str(uid) for uid in sorted(u for u in expected if u is not None))
    return (
        f"{_shown(peer)} is answered by a process of uid {owner}, not by the replica "
        f"published there (uid {wanted or 'none it can vouch for'}): not a replica of this "
        "gateway, nothing is sent to it"
    )


def _shown(address: Address) -> str:
    host = address[0]
    return f"[{host}]:{address[1]}" if ":" in host else f"{host}:{address[1]}"


class ReplicaIdentityCheck:
    """The identities the hosts published, read from the store now and then, and the check of one
    new connection against them."""

    def __init__(
        self,
        read: Callable[[], list[ReplicaIdentity]],
        owner_of: Callable[[Address, Address], Awaitable[int | None]] = socket_owner,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._read = read
        self._owner_of = owner_of
        self._clock = clock
        self.owners: ExpectedOwners = {}
        self._read_at: float | None = None
        self._reading: asyncio.Future[None] | None = None
        self._problem: str | None = None
        self._said: dict[Address, int | None] = {}  # refusals logged: peer -> its owner

    def load(self) -> None:
        """Read the published identities now (blocking); a store that cannot be read keeps the
        ones read before, and is logged once per new problem."""
        self._read_at = self._clock.monotonic_s()
        try:
            self.owners = expected_owners(self._read())
        except GpuplexError as error:
            if error.message != self._problem:
                log.error("cannot read who the replicas run as: %s", error.message)
            self._problem = error.message
            return
        self._problem = None

    async def reload(self) -> None:
        """`load` off the event loop; callers at the same moment share one read, and a read
        finished less than MIN_REREAD_S ago is not made again."""
        if self._read_at is not None and self._clock.monotonic_s() - self._read_at < MIN_REREAD_S:
            return
        if self._reading is None:
            loop = asyncio.get_running_loop()
            self._reading = asyncio.ensure_future(loop.run_in_executor(None, self.load))
            self._reading.add_done_callback(self._read_done)
        await asyncio.shield(self._reading)

    def _read_done(self, _: asyncio.Future[None]) -> None:
        self._reading = None

    async def run(self, stop: asyncio.Event, interval_s: float = REFRESH_INTERVAL_S) -> None:
        while not stop.is_set():
            await self.reload()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval_s)

    async def refusal(self, ours: Address, peer: Address) -> str | None:
        """Why the new connection from `ours` to `peer` must not be used; None when it may."""
        expected = self.owners.get(peer[1])
        if expected is None:
            return None
        owner = await self._owner_of(ours, peer)
        why = verdict(ours, peer, owner, expected)
        if why is not None:  # published since the last read? (a replica moved to another user)
            await self.reload()
            why = verdict(ours, peer, owner, self.owners.get(peer[1]))
        if why is None:
            self._said.pop(peer, None)
        elif peer not in self._said or self._said[peer] != owner:
            self._said[peer] = owner
            log.error("refused a connection to a replica: %s", why)
        return why


class IdentityCheckingConnector(aiohttp.TCPConnector):
    """A TCPConnector whose new connections are checked (`ReplicaIdentityCheck`) before their
    first request. It extends `connect`, the documented method by which a connector hands out a
    connection, pooled or new (aiohttp's client reference, `BaseConnector.connect`), and uses
    only the documented `Connection.transport`, `.protocol` and `.close()`. A pooled connection
    was checked when it was made: a set of the connections checked (weak, so a closed one is
    forgotten) keeps the check to once per connection."""

    def __init__(self, check: ReplicaIdentityCheck, **options: Any) -> None:
        super().__init__(**options)
        self._check = check
        self._checked: weakref.WeakSet[Any] = weakref.WeakSet()  # the protocols checked

    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Any],
        timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.connector.Connection:
        connection = await super().connect(req, traces, timeout)
        protocol, transport = connection.protocol, connection.transport
        if protocol is None or transport is None or protocol in self._checked:
            return connection
        ours, peer = transport.get_extra_info("sockname"), transport.get_extra_info("peername")
        why = None
        if ours is not None and peer is not None:  # TCP: (host, port, ...) both
            why = await self._check.refusal((ours[0], ours[1]), (peer[0], peer[1]))
        if why is not None:
            connection.close()
            raise ReplicaIdentityRefused(why)
        self._checked.add(protocol)
        return connection
