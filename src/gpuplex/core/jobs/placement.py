"""Where admitted jobs run: the same planner as the spec's replicas, on the capacity they leave.
Pure.

A job becomes a one-replica batch workload of its tenant (`JobSpec.as_workload`, named
`job-<id>`), and the live plan (the applied revision's placements and the running jobs') is
planned again with the jobs added and that plan as the current one: everything placed stays where
it is, and the new jobs go where the isolation rules of their tenant and the placement policy put
them, as any replica would. The planner's own preemption is off: which work gives way to a job is
the queue rules' decision (`gpuplex.core.queues.admission`), never the planner's. A job the
planner cannot place, or could place only by moving running work, waits, with the planner's
reasons.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.workloads import JOB_WORKLOAD_PREFIX


def job_workload_name(job_id: str) -> str:
    return f"{JOB_WORKLOAD_PREFIX}{job_id}"


def is_job_workload(name: str) -> bool:
    return name.startswith(JOB_WORKLOAD_PREFIX)


@dataclass(frozen=True, slots=True)
class JobPlacements:
    """The live plan with the jobs that could be placed, where each went, and why the others
    wait."""

    plan: Plan
    placed: Mapping[str, Placement]
    waiting: Mapping[str, str]


def live_spec(
    spec: GpuplexSpec,
    jobs: Mapping[str, JobSpec],
    grace_s: Mapping[str, float],
    env: Mapping[str, Mapping[str, str]] | None = None,
) -> GpuplexSpec:
    """`spec` with each job as a workload of its tenant (`grace_s` per job: SIGTERM to SIGKILL;
    `env` per job: variables gpuplex sets for it), and the planner's preemption off."""
    added: dict[str, list[object]] = {}
    for job_id, job in jobs.items():
        workload = job.as_workload(job_workload_name(job_id), grace_s.get(job_id, 30.0))
        own = (env or {}).get(job_id)
        if own:
            workload = workload.model_copy(update={"env": {**workload.env, **own}})
        added.setdefault(job.tenant, []).append(workload)
    tenants = [
        t.model_copy(update={"workloads": [*t.workloads, *added.get(t.name, [])]})
        for t in spec.tenants
    ]
    policy = spec.policy.model_copy(update={"preemption": False})
    return spec.model_copy(update={"tenants": tenants, "policy": policy})


def place_jobs(
    spec: GpuplexSpec,
    live_plan: Plan,
    running: Mapping[str, JobSpec],
    starting: Mapping[str, JobSpec],
    grace_s: Mapping[str, float],
) -> JobPlacements:
    """Place the `starting` jobs beside everything `live_plan` holds (the spec's replicas and the
    `running` jobs)."""
    planned = make_plan(live_spec(spec, {**running, **starting}, grace_s), current=live_plan)
    now = {(p.tenant, p.workload, p.replica): p for p in planned.placements}
    moved = [
        f"{p.tenant}/{p.workload}"
        for p in live_plan.placements
        if not _same_spot(p, now.get((p.tenant, p.workload, p.replica)))
    ]
    if moved:
        why = f"placing it now would move running work ({', '.join(sorted(moved))})"
        return JobPlacements(live_plan, {}, dict.fromkeys(starting, why))
    reasons = {(i.tenant, i.workload): "; ".join(i.reasons) for i in planned.infeasible}
    placed: dict[str, Placement] = {}
    waiting: dict[str, str] = {}
    for job_id, job in starting.items():
        where = now.get((job.tenant, job_workload_name(job_id), 0))
        if where is None:
            why = reasons.get((job.tenant, job_workload_name(job_id)), "no GPU was found for it")
            waiting[job_id] = f"no GPU has room for it now: {why}"
        else:
            placed[job_id] = where
    # waiting jobs are not part of the live plan: neither placed nor reported infeasible
    infeasible = [i for i in planned.infeasible if not is_job_workload(i.workload)]
    return JobPlacements(planned.model_copy(update={"infeasible": infeasible}), placed, waiting)


def _same_spot(before: Placement, after: Placement | None) -> bool:
    return after is not None and (
        before.node,
        before.gpu_indices,
        before.mode,
        before.mig,
    ) == (after.node, after.gpu_indices, after.mode, after.mig)
