"""One leader per store (the job runner's): a second process waits while the first leads, and
takes over once the first lets go, by closing or by dying (PostgreSQL: its connection gone)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from gpuplex.store.db import open_store
from gpuplex.store.leader import try_lead
from gpuplex.store.locks import StoreLock


def test_only_one_leads_until_it_lets_go(engine: Engine, store_url: str) -> None:
    other = open_store(store_url)
    try:
        first = try_lead(engine, StoreLock.JOB_RUNNER)
        assert first is not None
        assert first.held()
        assert try_lead(other, StoreLock.JOB_RUNNER) is None
        first.release()
        second = try_lead(other, StoreLock.JOB_RUNNER)
        assert second is not None
        assert try_lead(engine, StoreLock.JOB_RUNNER) is None
        second.release()
    finally:
        other.dispose()


def test_a_leader_whose_connection_dies_loses_the_lead_to_the_next(
    engine: Engine, store_url: str
) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite's lead is a file lock: the kernel drops it with the process")
    first = try_lead(engine, StoreLock.JOB_RUNNER)
    assert first is not None
    other = open_store(store_url)
    try:
        with other.connect() as admin:  # as a server restart or a network cut would
            admin.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_locks "
                    "WHERE locktype = 'advisory' AND classid = :lock AND granted"
                ),
                {"lock": int(StoreLock.JOB_RUNNER)},
            )
        assert not first.held()
        taken = try_lead(other, StoreLock.JOB_RUNNER)
        assert taken is not None
        taken.release()
    finally:
        first.release()
        other.dispose()
