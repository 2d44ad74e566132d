"""What the host runs while jobs run: the applied revision with the live jobs added. Pure.

The applied revision's spec and plan are never planned again (gpuplex.revision). A job that is
`starting` or `running` is one more replica of its tenant, placed where the runner placed it
(`core.jobs.placement`); the host runtime runs `live_revision(...)` as it runs any revision, so a
job starts as its placement is written and stops (SIGTERM, then SIGKILL after its queue's grace
period) as it leaves: `desired_host` needs nothing job-specific.

Each run of a job is told its attempt (`GPUPLEX_JOB_ATTEMPT`, 1 for the first): the host writes it
at the head of the run's logs and records it with how the run ended, so a report is always about
the attempt it names, and a job can tell a retry from its first run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gpuplex.core.jobs.placement import job_workload_name, live_spec
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import GpuView, Occupant, Placement
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec

#: SIGTERM to SIGKILL for a job whose tenant has no queue (it cannot be admitted; a safe default).
DEFAULT_GRACE_S = 30.0
#: The attempt a job's process runs, counting from 1 (a job's `attempts` + 1).
JOB_ATTEMPT_ENV = "GPUPLEX_JOB_ATTEMPT"


@dataclass(frozen=True, slots=True)
class LiveJob:
    """A job the host should run: its file and where the runner placed it."""

    id: str
    job: JobSpec
    placement: Placement
    attempt: int = 0  # the job's attempts: 0 for its first run


def attempt_env(attempt: int) -> dict[str, str]:
    """The variables that tell a job's run which attempt it is (`attempt` counts from 0)."""
    return {JOB_ATTEMPT_ENV: str(attempt + 1)}


def attempt_of(env: Mapping[str, str]) -> int | None:
    """The attempt (from 0) a run's environment names; None when it names none."""
    value = env.get(JOB_ATTEMPT_ENV, "")
    return int(value) - 1 if value.isdigit() and int(value) > 0 else None


def grace_s(tree: QueueTree | None, tenant: str) -> float:
    """The grace period of `tenant`'s queue: how long a stopped job has from SIGTERM to SIGKILL."""
    path = tree.paths.get(tenant) if tree is not None else None
    return float(path[-1].preemption.grace_s) if path else DEFAULT_GRACE_S


def job_placement(job_id: str, placement: Placement) -> Placement:
    """The placement as the job's one replica (`job-<id>`, replica 0)."""
    return placement.model_copy(update={"workload": job_workload_name(job_id), "replica": 0})


def with_jobs(plan: Plan, placements: Sequence[Placement]) -> Plan:
    """`plan` with `placements` added, on its GPU views too (their MIG slices and MPS shares are
    what the host creates for them)."""
    if not placements:
        return plan
    views = {(v.node, v.index): v for v in plan.gpus}
    for placement in placements:
        per_gpu_mib = placement.memory_mib // max(1, len(placement.gpu_indices))
        occupant = Occupant(
            tenant=placement.tenant,
            workload=placement.workload,
            replica=placement.replica,
            mig=placement.mig,
            memory_mib=per_gpu_mib,
            thread_percent=placement.thread_percent,
        )
        for index in placement.gpu_indices:
            view = views.get((placement.node, index))
            if view is not None:
                views[placement.node, index] = _occupied(view, occupant, placement)
    return plan.model_copy(
        update={
            "placements": [*plan.placements, *placements],
            "gpus": [views[v.node, v.index] for v in plan.gpus],
        }
    )


def without_workloads(plan: Plan, names: Collection[str]) -> Plan:
    """`plan` without the placements of the workloads `names`, on its GPU views too (`with_jobs`
    undone): what is left once they have left their GPUs."""
    if not names:
        return plan
    gpus = [
        g.model_copy(update={"occupants": [o for o in g.occupants if o.workload not in names]})
        for g in plan.gpus
    ]
    placements = [p for p in plan.placements if p.workload not in names]
    return plan.model_copy(update={"placements": placements, "gpus": gpus})


def live_revision(
    spec: GpuplexSpec, plan: Plan, tree: QueueTree | None, jobs: Sequence[LiveJob]
) -> tuple[GpuplexSpec, Plan]:
    """The spec and plan the host runs: the applied ones with each live job as a replica."""
    files = {j.id: j.job for j in jobs}
    graces = {j.id: grace_s(tree, j.job.tenant) for j in jobs}
    env = {j.id: attempt_env(j.attempt) for j in jobs}
    placed = [job_placement(j.id, j.placement) for j in jobs]
    return live_spec(spec, files, graces, env), with_jobs(plan, placed)


def _occupied(view: GpuView, occupant: Occupant, placement: Placement) -> GpuView:
    return view.model_copy(
        update={
            "mode": view.mode or placement.mode,
            "occupants": [*view.occupants, occupant],
        }
    )
