"""`host run --follow-store` tells the gateway who each of its replicas is: for every replica of
the desired state that serves on a port, the Unix user it runs as (its listening socket's owner)
and when its process last started, in the store's `replica_identities` (processes meet only
through the store). The gateway checks the owner of each new connection to a replica on its host
against it, so a process of another user that took the port (another tenant's workload, while
the replica restarted) is never sent a request (gateway/replica_identity.py).

The user is the one the process runtime starts the replica as (`UserChooser`): the tenant's own
when gpuplex runs as root, gpuplex's own otherwise (then every replica shares it, and the check
tells gpuplex's processes from others' but not tenants from each other). A replica in a container
is not published: the engine's port proxy, not the tenant's user, owns its socket on the host.
A replica whose user cannot be found is published with no user: nothing answering on its port is
taken. Rows are written when they change, and a pass that cannot reach the store writes them on
the next one."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Protocol

from gpuplex.clock import utc_now
from gpuplex.core.apply.model import LIVE_PHASES, WorkloadDesired
from gpuplex.core.spec.runtime import Runtime
from gpuplex.errors import GpuplexError
from gpuplex.host.launcher import UserChooser
from gpuplex.host.session import Follower
from gpuplex.host.state import DesiredFile, HostState, StateDir
from gpuplex.store.replica_identities import ReplicaIdentity

log = logging.getLogger(__name__)


class IdentitySink(Protocol):
    """Where identities go: the store's `replica_identities` (store/replica_identities.py)."""

    def publish(
        self, node: str, replicas: Collection[ReplicaIdentity], *, now: datetime
    ) -> None: ...


class IdentityPublisher:
    """A Follower that publishes the replicas' identities as the one it wraps takes a new desired
    state (before the pass that starts its replicas) and after each pass."""

    def __init__(
        self,
        follower: Follower,
        identities: IdentitySink,
        dirs: StateDir,
        users: UserChooser | None = None,
    ) -> None:
        self._follower = follower
        self._identities = identities
        self._dirs = dirs
        self._users = users or UserChooser(dirs.instance, dirs.homes)
        self._uids: dict[tuple[str, str | None], int | None] = {}
        self._desired: DesiredFile | None = None
        self._state = HostState()
        self._published: tuple[str, frozenset[ReplicaIdentity]] | None = None

    def take_newest(self, state: HostState) -> DesiredFile | None:
        newest = self._follower.take_newest(state)
        if newest is not None:
            self._desired = newest
            self._publish()  # before its new replicas start: no moment nobody vouches for them
        return newest

    def after_tick(self, state: HostState) -> set[str]:
        forgotten = self._follower.after_tick(state)
        self._state = state
        self._publish()
        return forgotten

    def _publish(self) -> None:
        desired = self._desired or self._dirs.read_desired()
        if desired is None:
            return
        self._desired = desired
        node = desired.node.name
        started = {
            r.label: r.started_at_s
            for r in self._state.records
            if r.phase in LIVE_PHASES and r.started_at_s is not None
        }
        replicas = frozenset(
            ReplicaIdentity(
                node,
                wanted.tenant,
                wanted.workload,
                wanted.replica,
                wanted.port,
                self._uid(wanted),
                _utc(started.get(wanted.label)),
            )
            for wanted in desired.host.workloads
            if wanted.port is not None and wanted.runtime is Runtime.PROCESS
        )
        if self._published == (node, replicas):
            return
        try:
            self._identities.publish(node, replicas, now=utc_now())
        except GpuplexError as error:
            log.warning("cannot publish who the replicas run as: %s", error.message)
            return
        self._published = (node, replicas)

    def _uid(self, wanted: WorkloadDesired) -> int | None:
        """The uid the process runtime runs `wanted` as (remembered per tenant and unix_user)."""
        key = (wanted.tenant, wanted.unix_user)
        if key not in self._uids:
            try:
                user = self._users.user_of(wanted)
            except GpuplexError as error:  # it cannot start either; said by the runtime
                log.warning("%s: no user to vouch for: %s", wanted.label, error.message)
                return None  # asked again on the next pass
            self._uids[key] = os.geteuid() if user is None else user.uid
        return self._uids[key]


def _utc(epoch_s: float | None) -> datetime | None:
    return None if epoch_s is None else datetime.fromtimestamp(epoch_s, UTC)
