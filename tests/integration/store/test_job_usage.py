"""The job runner's fair-share memory read from the store (SQLite and PostgreSQL): each job run
counts what its placement holds from its start until it left the GPU (or until now), decayed
with the queue tree's half-life, and runs older than the horizon are not read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from gpuplex.core.jobs.states import JobState
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.queues.usage import decayed_seconds
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.server.job_usage import decayed_job_usage
from gpuplex.store.jobs import JobRepository
from tests.integration.store.test_jobs import job_of, placed_on

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY_S = 86_400.0


def tree(half_life_s: float) -> QueueTree:
    tenants = (QueueNode("acme", "tenant"), QueueNode("globex", "tenant"))
    cap = {GPUS: 8.0}
    return QueueTree.of(
        QueueNode("cluster", "cluster", cap, cap, children=tenants), cap, half_life_s
    )


def ran(jobs: JobRepository, tenant: str, start: datetime, end: datetime | None) -> None:
    """A job of `tenant` on one whole GPU from `start` until `end` (None: still running)."""
    job = jobs.submit(job_of(tenant), now=start, actor="alice")
    placement = placed_on("n1", tenant=tenant, job_id=job.id)
    jobs.transition(job.id, JobState.STARTING, "admitted", now=start, placement=placement)
    jobs.transition(job.id, JobState.RUNNING, "started", now=start)
    if end is not None:
        jobs.transition(job.id, JobState.SUCCEEDED, "exited 0", now=end, exit_code=0)


def test_runs_count_from_start_to_end_decayed_and_old_ones_are_not_read(engine: Engine) -> None:
    jobs = JobRepository(engine)
    ran(jobs, "acme", NOW - 26 * HOUR, NOW - 24 * HOUR)  # two hours, yesterday
    ran(jobs, "globex", NOW - HOUR, None)  # one hour so far, still running
    ran(jobs, "globex", NOW - 10 * 24 * HOUR, NOW - 9 * 24 * HOUR)  # past the horizon
    usage = decayed_job_usage(jobs, tree(DAY_S), NOW)
    now_s = NOW.timestamp()
    acme = decayed_seconds(now_s - 26 * 3600, now_s - 24 * 3600, now_s, DAY_S)
    globex = decayed_seconds(now_s - 3600, None, now_s, DAY_S)
    assert usage["acme"][GPUS] == pytest.approx(acme)
    assert usage["globex"][GPUS] == pytest.approx(globex)  # the old run is not in it
    assert usage["acme"][GPUS] == pytest.approx(2 * 3600 / 2, rel=0.05)  # half: a day old


def test_without_a_half_life_nothing_is_read(engine: Engine) -> None:
    jobs = JobRepository(engine)
    ran(jobs, "acme", NOW - HOUR, None)
    assert decayed_job_usage(jobs, tree(0.0), NOW) == {}
