"""What the dashboard's queues panel reads (`GET /queues`): the queue tree of the applied spec, each
queue with its guarantee, limit, what is in use and what is borrowed per kind, and the jobs: the
queued ones with their place in their tenant's queue and why they wait, and those that hold
capacity with where they run.

In use is what the admission rules count (`gpuplex.core.queues.standing`): the spec's replicas as
the applied plan placed them, and each starting, running, preempting or stopping job's GPU request.
Why a job waits comes from the same read-only admission round as `job show`
(`gpuplex.server.job_views.waiting_now`).

A platform admin sees every queue, the cluster's included, and every job. A tenant-scoped caller
sees its own tenant's queue and its jobs, and the organisation and team above it as aggregate
numbers only (no job counts, no children): never another tenant's queue, jobs, names or reasons
(`gpuplex.server.reason_filter`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from gpuplex.core.access import Principal
from gpuplex.core.jobs.holdings import plan_holdings, request_ask
from gpuplex.core.jobs.states import JobState
from gpuplex.core.queues.admission import Holding
from gpuplex.core.queues.standing import QueueStanding, kind_order, standings
from gpuplex.core.queues.tree import QueueTree, queue_tree
from gpuplex.server.job_runner import JobStepInputs
from gpuplex.server.job_views import waiting_now
from gpuplex.server.reason_filter import ReasonFilter
from gpuplex.store.jobs import Job

TENANT_LEVEL = "tenant"


class KindReply(BaseModel):
    kind: str  # gpus, gpu_memory_gib, compute_percent or mig:<profile>
    guarantee: float
    limit: float | None  # None: this queue sets no limit on this kind
    in_use: float
    borrowed: float  # in use above the guarantee


class QueueReply(BaseModel):
    name: str
    level: str  # cluster, organisation, team or tenant
    parent: str | None
    depth: int  # 0: the cluster; 3: a tenant's queue
    weight: float
    lends: bool
    borrows: bool
    resources: list[KindReply]
    #: a tenant's queue only: its jobs that are queued, and that hold capacity
    queued_jobs: int | None
    holding_jobs: int | None


class JobPlacementReply(BaseModel):
    node: str | None
    gpu_indices: list[int]
    mode: str | None  # dedicated, mig, mps or timeslice
    mig_profile: str | None
    memory_mib: int | None


class QueueJobReply(BaseModel):
    id: str
    tenant: str
    name: str | None
    state: JobState
    reason: str  # the last reason its state changed for
    priority: int
    ask: dict[str, float]  # what it counts against its queues, per kind
    submitted_at: datetime
    started_at: datetime | None
    attempts: int
    cancel_requested: bool
    position: int | None  # queued: its place in its tenant's queue (1: the next to start)
    waiting_reason: str | None  # queued: why it waits now, in plain words
    placement: JobPlacementReply | None  # holding capacity: where it runs, once placed


class QueuesReply(BaseModel):
    revision: int | None  # the applied revision; None before the first apply
    configured: bool  # whether the applied spec has `queues:`
    queues: list[QueueReply]  # parents before children
    jobs: list[QueueJobReply]  # the queued ones (by position), then those holding capacity
    queued_truncated: bool  # more queued jobs than `limit`: the first by position are listed


def queues_view(inputs: JobStepInputs, principal: Principal, limit: int) -> QueuesReply:
    """The queues panel's data for `principal`, with at most `limit` queued jobs."""
    applied = inputs.current.get()
    if applied is None:
        return QueuesReply(
            revision=None, configured=False, queues=[], jobs=[], queued_truncated=False
        )
    now = waiting_now(inputs, applied)
    own = None if principal.is_platform else principal.tenant
    tree = queue_tree(applied.spec)
    queues: list[QueueReply] = []
    if tree is not None:
        holdings = [*plan_holdings(applied.plan), *(_holding(j) for j in now.holding)]
        counts = _job_counts(now.queued, now.holding)
        seen = None if own is None else _own_path(tree, own)
        queues = [
            _queue(s, counts) for s in standings(tree, holdings) if seen is None or s.name in seen
        ]
    shown = ReasonFilter.for_caller(
        principal, (*now.queued, *now.holding), applied.tenant_names, tree
    )
    mine = [j for j in now.queued if own is None or j.tenant == own]
    positions = _positions(mine)
    queued = sorted(mine, key=lambda j: (positions[j.id], j.submitted_at, j.id))
    holding = sorted(
        (j for j in now.holding if own is None or j.tenant == own),
        key=lambda j: (j.started_at or j.submitted_at, j.id),
    )
    jobs = [_job(j, positions[j.id], shown(now.reason(j.id))) for j in queued[:limit]]
    jobs += [_job(j, None, None) for j in holding]
    return QueuesReply(
        revision=applied.revision,
        configured=tree is not None,
        queues=queues,
        jobs=jobs,
        queued_truncated=len(queued) > limit,
    )


def _holding(job: Job) -> Holding:
    return Holding(job.id, job.tenant, request_ask(job.spec.gpu), job.priority)


def _job_counts(queued: Sequence[Job], holding: Sequence[Job]) -> Mapping[str, tuple[int, int]]:
    """Per tenant: its queued jobs and its jobs that hold capacity."""
    counts: dict[str, tuple[int, int]] = {}
    for job in queued:
        waiting, held = counts.get(job.tenant, (0, 0))
        counts[job.tenant] = (waiting + 1, held)
    for job in holding:
        waiting, held = counts.get(job.tenant, (0, 0))
        counts[job.tenant] = (waiting, held + 1)
    return counts


def _queue(standing: QueueStanding, counts: Mapping[str, tuple[int, int]]) -> QueueReply:
    waiting, held = counts.get(standing.name, (0, 0))
    leaf = standing.level == TENANT_LEVEL
    return QueueReply(
        name=standing.name,
        level=standing.level,
        parent=standing.parent,
        depth=standing.depth,
        weight=standing.weight,
        lends=standing.lends,
        borrows=standing.borrows,
        resources=[
            KindReply(
                kind=k.kind,
                guarantee=k.guarantee,
                limit=k.limit,
                in_use=k.in_use,
                borrowed=k.borrowed,
            )
            for k in standing.kinds
        ],
        queued_jobs=waiting if leaf else None,
        holding_jobs=held if leaf else None,
    )


def _own_path(tree: QueueTree, tenant: str) -> set[str]:
    """The queues a tenant-scoped caller sees: its organisation's, its team's and its own (none
    when its tenant has no queue)."""
    if tree.tenant(tenant) is None:
        return set()
    return {q.name for q in tree.paths[tenant][1:]}


def _positions(queued: Iterable[Job]) -> dict[str, int]:
    """Each queued job's place in its tenant's queue, in the order the admission rules take them:
    higher priority first, then the oldest (`gpuplex.core.queues.admission.queue_order`)."""
    by_tenant: dict[str, list[Job]] = {}
    for job in queued:
        by_tenant.setdefault(job.tenant, []).append(job)
    positions: dict[str, int] = {}
    for jobs in by_tenant.values():
        jobs.sort(key=lambda j: (-j.priority, j.submitted_at, j.id))
        positions |= {job.id: place for place, job in enumerate(jobs, start=1)}
    return positions


def _job(job: Job, position: int | None, waiting: str | None) -> QueueJobReply:
    ask = request_ask(job.spec.gpu)
    return QueueJobReply(
        id=job.id,
        tenant=job.tenant,
        name=job.name,
        state=job.state,
        reason=job.reason,
        priority=job.priority,
        ask={kind: ask[kind] for kind in sorted(ask, key=kind_order)},
        submitted_at=job.submitted_at,
        started_at=job.started_at,
        attempts=job.attempts,
        cancel_requested=job.cancel_requested,
        position=position,
        waiting_reason=waiting,
        placement=_placement(job.placement),
    )


def _placement(placement: Mapping[str, Any] | None) -> JobPlacementReply | None:
    """Where the runner placed the job (a plan placement as JSON), read field by field: what is
    missing or of another type is left out."""
    if not placement:
        return None
    node = placement.get("node")
    indices = placement.get("gpu_indices")
    mode = placement.get("mode")
    mig = placement.get("mig")
    profile = mig.get("profile") if isinstance(mig, Mapping) else None
    memory = placement.get("memory_mib")
    return JobPlacementReply(
        node=node if isinstance(node, str) else None,
        gpu_indices=[i for i in indices if isinstance(i, int)] if isinstance(indices, list) else [],
        mode=mode if isinstance(mode, str) else None,
        mig_profile=profile if isinstance(profile, str) else None,
        memory_mib=memory if isinstance(memory, int) else None,
    )
