"""The tenants' decayed past job usage, as the admission rules' fair-share order reads it: each
stored run of a job (`JobRepository.runs`) held what its placement holds, in the queues' kinds,
from its start until it ended (or until now), decayed with the queue tree's half-life
(`gpuplex.core.queues.usage`). Runs older than the horizon (8 half-lives) are not read."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuplex.core.jobs.holdings import placement_holds
from gpuplex.core.plan.model import Placement
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.queues.usage import UsageInterval, decayed_usage, usage_horizon_s
from gpuplex.store.job_runs import JobRun
from gpuplex.store.jobs import JobRepository


def decayed_job_usage(
    jobs: JobRepository, tree: QueueTree, now: datetime
) -> dict[str, dict[str, float]]:
    """Per tenant, per kind: its jobs' decayed usage at `now` (kind-seconds)."""
    horizon_s = usage_horizon_s(tree.half_life_s)
    if horizon_s <= 0:
        return {}
    runs = jobs.runs(now - timedelta(seconds=horizon_s), now)
    return decayed_usage(map(usage_interval, runs), now.timestamp(), tree.half_life_s)


def usage_interval(run: JobRun) -> UsageInterval:
    held = placement_holds(Placement.model_validate(run.placement))
    end = run.ended_at.timestamp() if run.ended_at is not None else None
    return UsageInterval(run.tenant, held, run.started_at.timestamp(), end)
