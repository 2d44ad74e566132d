"""What `host run --follow-store` publishes for the gateway: each served replica of its desired
state that runs as a process, with the uid it runs as and when it started; before the pass that
starts a new desired state's replicas and after each pass, only when something changed, and again
on the next pass when the store was away."""

from __future__ import annotations

import os
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuplex.core.apply.desired import desired_host
from gpuplex.core.apply.model import Phase, WorkloadRecord
from gpuplex.core.plan import make_plan
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.errors import StoreError
from gpuplex.host.identity_publisher import IdentityPublisher
from gpuplex.host.launcher import UserChooser
from gpuplex.host.state import DesiredFile, HostState, StateDir
from gpuplex.store.replica_identities import ReplicaIdentity

STARTED_S = 1_700_000_000.0


def desired() -> DesiredFile:
    data: dict[str, Any] = {
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 4}]}]},
        "host": {"runtime": "docker"},
        "tenants": [
            {
                "name": "acme",
                "isolation": "dedicated",
                "workloads": [
                    {
                        "name": "chat",
                        "gpu": {"count": 1},
                        "replicas": 2,
                        "serve": {"model": "chat", "port": 8000},
                        "command": ["serve"],
                    },
                    {"name": "train", "kind": "batch", "gpu": {"count": 1}, "command": ["t"]},
                ],
            },
            {
                "name": "globex",
                "isolation": "dedicated",
                "workloads": [
                    {
                        "name": "chat",
                        "gpu": {"count": 1},
                        "serve": {"model": "chat", "port": 9000},
                        "image": "vllm/vllm-openai",  # in a container: its engine owns the port
                    }
                ],
            },
        ],
    }
    spec = validate_spec(data)
    assert isinstance(spec, GpuplexSpec), spec
    plan = make_plan(spec)
    return DesiredFile(
        spec_path="gpuplex.yaml",
        spec_sha256="0" * 64,
        driver="sim",
        plan=plan,
        node=spec.fleet.nodes[0],
        host=desired_host(spec, plan, "box"),
        applied_at=datetime.now(UTC),
    )


class Follower:
    """Hands out one desired state, then none; remembers the passes it was told about."""

    def __init__(self, newest: DesiredFile) -> None:
        self.newest: DesiredFile | None = newest
        self.ticks = 0

    def take_newest(self, state: HostState) -> DesiredFile | None:
        newest, self.newest = self.newest, None
        return newest

    def after_tick(self, state: HostState) -> set[str]:
        self.ticks += 1
        return set()


class Store:
    """The store's table, as the gateway reads it: each publish replaces the node's rows."""

    def __init__(self) -> None:
        self.rows: dict[str, list[ReplicaIdentity]] = {}
        self.writes = 0
        self.away = False

    def publish(self, node: str, replicas: Collection[ReplicaIdentity], *, now: datetime) -> None:
        if self.away:
            raise StoreError("the store is away")
        self.writes += 1
        self.rows[node] = sorted(replicas, key=lambda r: (r.tenant, r.workload, r.replica))


def test_served_process_replicas_are_published_with_their_user_and_start(tmp_path: Path) -> None:
    wanted = desired()
    dirs = StateDir(tmp_path / "state")
    users = UserChooser(dirs.instance, dirs.homes, as_root=False)  # replicas run as gpuplex
    follower, store = Follower(wanted), Store()
    publisher = IdentityPublisher(follower, store, dirs, users)

    assert publisher.take_newest(HostState()) is wanted  # published before the pass starts anything
    me = os.geteuid()
    assert store.rows["box"] == [
        ReplicaIdentity("box", "acme", "chat", 0, 8000, me, None),
        ReplicaIdentity("box", "acme", "chat", 1, 8001, me, None),
    ]  # not the batch workload (no port), not the container (its engine's proxy owns the port)

    chat0 = next(w for w in wanted.host.workloads if (w.workload, w.replica) == ("chat", 0))
    running = WorkloadRecord(desired=chat0, phase=Phase.RUNNING, pid=5, started_at_s=STARTED_S)
    publisher.after_tick(HostState(records=[running]))
    assert follower.ticks == 1
    assert store.rows["box"][0].started_at == datetime.fromtimestamp(STARTED_S, UTC)
    assert store.writes == 2

    publisher.take_newest(HostState())
    publisher.after_tick(HostState(records=[running]))  # nothing changed: nothing written
    assert store.writes == 2

    store.away = True
    publisher.after_tick(HostState())  # chat#0 ended; the store cannot be written: said, kept
    assert store.rows["box"][0].started_at is not None
    store.away = False
    publisher.after_tick(HostState())
    assert store.writes == 3
    assert store.rows["box"][0].started_at is None
