"""A reservation for a job no node can take now: the GPUs it will start on, and from when. Pure.

As Slurm's backfill: the first job the queues admit inside its tenant's guarantee that no node has
room for gets the GPUs where it could start earliest, and the time those free at the latest. Each
job holding a GPU frees it by a known time when it has a max runtime (its start + max runtime +
its grace period: gpuplex stops it then, SIGTERM, then SIGKILL), and a job already stopping frees
it within its grace period; a job without a max runtime (and the spec's replicas) frees it at a
time nobody knows. The reservation is found with the planner itself (`place_jobs`), on the live
plan as it will be once the jobs that end by a moment have ended: the earliest such moment it can
be placed at. Later work may use the reserved GPUs meanwhile only if it is sure to have left them
by then (`JobReservation.allows`); elsewhere it starts as before.

Nothing is stored: every step finds the reservation again from what holds the GPUs now, so a
higher-priority job that arrives meanwhile takes the reservation over, and a job that ends early
brings the start forward.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplex.core.jobs.live import without_workloads
from gpuplex.core.jobs.placement import job_workload_name, place_jobs
from gpuplex.core.jobs.retries import not_before_words
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.workloads import GpuRequestSpec

#: How the stand-ins that hold a reservation's free GPUs are named (a job id never starts so).
_HOLDER_PREFIX = "reserved-"
#: Job ids a reason names before "and N more".
_NAMES_SHOWN = 3


@dataclass(frozen=True, slots=True)
class HeldGpus:
    """A job holding GPUs now, and the latest time it has left them (None: nobody knows);
    `leaving`: it is being stopped."""

    job_id: str
    job: JobSpec
    placement: Placement
    free_by_s: float | None
    leaving: bool = False


@dataclass(frozen=True, slots=True)
class JobReservation:
    """Where `job_id` will start (`placement`), from `start_s` at the latest (None: it waits for
    jobs without a max runtime), once the jobs in `waiting_for` have left its GPUs."""

    job_id: str
    placement: Placement
    start_s: float | None
    waiting_for: tuple[str, ...]

    @property
    def gpus(self) -> frozenset[tuple[str, int]]:
        return frozenset((self.placement.node, i) for i in self.placement.gpu_indices)

    def allows(self, ends_by_s: float | None) -> bool:
        """May work sure to have left by `ends_by_s` (None: no bound) use the reserved GPUs
        before the reservation starts?"""
        return self.start_s is not None and ends_by_s is not None and ends_by_s <= self.start_s

    def words(self, now_s: float) -> str:
        """`reserved 8 GPUs on node-3 from about 14:20:00 UTC, in 600 s; waiting for job j12 to
        end` (a tenant-scoped reader sees other tenants' job ids hidden)."""
        count = len(self.placement.gpu_indices)
        where = f"{count} GPU{'s' if count != 1 else ''} on {self.placement.node}"
        ids = list(self.waiting_for)
        named = ", ".join(ids[:_NAMES_SHOWN])
        if len(ids) > _NAMES_SHOWN:
            named += f" and {len(ids) - _NAMES_SHOWN} more"
        jobs = f"job{'s' if len(ids) != 1 else ''} {named}"
        if self.start_s is None:
            return (
                f"reserved {where}; waiting for {jobs} to end "
                "(not all of them have a max runtime, so when is not known)"
            )
        ends = "to end" if ids else "to be free"
        return (
            f"reserved {where} from about {not_before_words(self.start_s, now_s)}; "
            f"waiting for {jobs} {ends}"
        )


def ends_by_s(job: JobSpec, started_s: float, grace_s: float) -> float | None:
    """The latest a job started at `started_s` has left its GPUs: gpuplex stops it at its max
    runtime, and kills it after its grace period. None: it has no max runtime."""
    if job.max_runtime_s is None:
        return None
    return started_s + float(job.max_runtime_s) + grace_s


def find_reservation(
    spec: GpuplexSpec,
    occupied: Plan,
    held: Sequence[HeldGpus],
    job_id: str,
    job: JobSpec,
    grace_s: Mapping[str, float],
) -> JobReservation | None:
    """The reservation for `job` (asking whole GPUs) on the live plan `occupied` (the spec's
    replicas and the `held` jobs): the earliest moment some jobs' ends free room for it, and
    where; None when it has room now (what it waits for is not GPUs), or none even with every
    job gone (only a new spec can give it room). The moments are tried by bisection: ending more jobs never takes room away."""
    moments = [-math.inf, *sorted({h.free_by_s for h in held if h.free_by_s is not None})]
    moments.append(math.inf)

    def placed_at(moment: float) -> Placement | None:
        gone = {h.job_id for h in held if _gone_by(h, moment)}
        plan = without_workloads(occupied, {job_workload_name(j) for j in gone})
        still = {h.job_id: h.job for h in held if h.job_id not in gone}
        return place_jobs(spec, plan, still, {job_id: job}, grace_s).placed.get(job_id)

    first = bisect.bisect_left(moments, True, key=lambda m: placed_at(m) is not None)
    if first in (0, len(moments)):  # room now (it waits for quota, not GPUs), or never
        return None
    moment = moments[first]
    where = placed_at(moment)
    assert where is not None  # bisect found it placed there
    gpus = {(where.node, i) for i in where.gpu_indices}
    blocking = [
        h
        for h in held
        if _gone_by(h, moment) and {(h.placement.node, i) for i in h.placement.gpu_indices} & gpus
    ]
    known = [h.free_by_s for h in blocking if h.free_by_s is not None]
    start: float | None = None
    if len(known) == len(blocking):
        start = max(known, default=moment)
    return JobReservation(job_id, where, start, tuple(sorted(h.job_id for h in blocking)))


def holders(
    reservation: JobReservation, free_now: Sequence[int]
) -> dict[str, tuple[JobSpec, Placement]]:
    """Stand-in one-GPU jobs that hold the reserved GPUs free now (`free_now`, on the
    reservation's node), so the planner places nothing there; each with its placement."""
    base = reservation.placement
    out: dict[str, tuple[JobSpec, Placement]] = {}
    for n, index in enumerate(free_now):
        holder_id = f"{_HOLDER_PREFIX}{reservation.job_id}-{n}"
        placement = base.model_copy(
            update={
                "workload": job_workload_name(holder_id),
                "replica": 0,
                "mode": Mode.DEDICATED,
                "gpu_indices": [index],
                "memory_mib": base.memory_mib // max(1, len(base.gpu_indices)),
                "compute_percent": 100,
                "reason": f"reserved for job {reservation.job_id}",
            }
        )
        out[holder_id] = (_one_gpu(base.tenant), placement)
    return out


def _one_gpu(tenant: str) -> JobSpec:
    return JobSpec(tenant=tenant, gpu=GpuRequestSpec(count=1), command=["reserved"])


def _gone_by(held: HeldGpus, moment: float) -> bool:
    if moment == math.inf:
        return True
    return held.free_by_s is not None and held.free_by_s <= moment
