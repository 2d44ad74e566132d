"""Who each replica runs as, as the host runtime publishes it for the gateway: a node's rows are
replaced whole, another node's are left alone; and a store migrated to this revision keeps every
job readable, a job stored with `network: host` now with `network: none`."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, text

from gpuplex.core.spec.runtime import Network
from gpuplex.store.jobs import JobRepository
from gpuplex.store.migrate import HEAD_REVISION, downgrade_store, store_revision, upgrade_store
from gpuplex.store.replica_identities import ReplicaIdentities, ReplicaIdentity

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_nodes_identities_are_replaced_whole_and_others_kept(engine: Engine) -> None:
    identities = ReplicaIdentities(engine)
    assert identities.all() == []
    box = [
        ReplicaIdentity("box", "acme", "chat", 0, 8000, 1001, T0),
        ReplicaIdentity("box", "acme", "chat", 1, 8001, 1001, None),
        ReplicaIdentity("box", "globex", "chat", 0, 9000, None, None),
    ]
    identities.publish("box", box, now=T0)
    identities.publish("other", [ReplicaIdentity("other", "acme", "chat", 2, 8002, 7, T0)], now=T0)
    assert identities.all() == [*box, ReplicaIdentity("other", "acme", "chat", 2, 8002, 7, T0)]
    identities.publish("box", box[:1], now=T0)  # acme's second replica and globex left the plan
    assert [(i.node, i.port) for i in identities.all()] == [("box", 8000), ("other", 8002)]
    identities.publish("box", [], now=T0)
    assert [i.node for i in identities.all()] == ["other"]


def test_a_job_stored_with_network_host_runs_with_network_none_after_the_migration(
    engine: Engine,
) -> None:
    downgrade_store(engine, "0008")
    job = (
        '{"tenant": "acme", "gpu": {"count": 1}, "command": ["train"], "network": "host", '
        '"env": {}, "priority": 0, "limits": {}}'
    )
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO jobs (id, tenant, name, job, priority, state, reason, submitted_at, "
                "attempts, actor, cancel_requested) VALUES ('j00000001', 'acme', NULL, :job, 0, "
                "'queued', '', :at, 0, 'tester', false)"
            ),
            {"job": job, "at": T0},
        )
    upgrade_store(engine)
    assert store_revision(engine) == HEAD_REVISION
    stored = JobRepository(engine).get("j00000001")
    assert stored is not None
    assert stored.spec.network is Network.NONE
    assert stored.spec.command == ["train"]
