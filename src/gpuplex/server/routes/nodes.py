"""The GPU map: every node's GPUs with their mode and occupants (MIG slices, MPS shares,
time-slices, whole GPUs), from the live plan: the applied plan with the placement of every job
that holds a GPU (starting, running, or being stopped: `core.jobs.live.with_jobs`, as the host
runs it), with the memory each replica was last seen using. A job is an occupant like a replica
(workload `job-<id>`, replica 0) that says which job it is (`job`: id, name, state).
A model server that other tenants' LoRA adapters ride on lists them as its riders, each with its
part of the server's tokens over the last RIDER_SHARE_WINDOW_S (what it pays of the server).

A tenant-scoped caller sees only the GPUs that hold their own replicas or jobs, and only their own
occupants on them: other tenants' replicas and jobs are not shown, not even by name or id."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi import APIRouter
from pydantic import BaseModel

from gpuplex.clock import Clock
from gpuplex.core.access import Permission, Principal
from gpuplex.core.jobs.live import job_placement, with_jobs
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import HOLDING_STATES, JobState
from gpuplex.core.meter import GpuSample, MeterWindow, shared_servers, token_shares
from gpuplex.core.plan import GpuView, Occupant, Plan
from gpuplex.core.plan.model import Placement
from gpuplex.revision import AppliedRevision
from gpuplex.server.auth import CurrentPrincipal, require
from gpuplex.server.dependencies import Current, Jobs, Samples, TheClock, TheMetering
from gpuplex.server.metering import Metering
from gpuplex.server.problems import ERROR_RESPONSES
from gpuplex.store.jobs import Job, JobRepository

router = APIRouter(tags=["nodes"], responses=ERROR_RESPONSES)
#: Riders' shares of a shared server are their tokens over this long, up to now.
RIDER_SHARE_WINDOW_S = 86_400


class RiderReply(BaseModel):
    """A LoRA adapter of another tenant served by this replica's model server."""

    tenant: str
    workload: str  # the adapter workload
    model: str  # the name its tenant sends
    token_share: float | None  # its part of the server's tokens; None: the server served none


class OccupantJobReply(BaseModel):
    """The job an occupant is."""

    id: str
    name: str | None
    state: JobState


class OccupantReply(BaseModel):
    tenant: str
    workload: str
    replica: int
    mig_profile: str | None
    mig_start_slot: int | None
    mig_size_slots: int | None
    memory_mib: int  # what the plan gives it
    thread_percent: int | None
    used_memory_mib: int | None  # last measured on this GPU; None: no sample yet
    utilization_percent: float | None
    riders: list[RiderReply] = []  # the other tenants whose adapters this server carries
    job: OccupantJobReply | None = None  # set when the occupant is a job, not a replica


class GpuReply(BaseModel):
    index: int
    model: str
    uuid: str | None
    pool: str | None
    mode: str | None  # dedicated | mig | mps | timeslice; None: idle
    memory_mib: int
    occupants: list[OccupantReply]


class NodeReply(BaseModel):
    name: str
    gpus: list[GpuReply]


class NodesReply(BaseModel):
    revision: int | None
    sampled_at: datetime | None
    nodes: list[NodeReply]
    rider_share_window_s: int = RIDER_SHARE_WINDOW_S


Riders = dict[tuple[str, str], list[RiderReply]]  # (owner, workload) of a model server -> riders


UsedOnGpu = dict[tuple[str, str, int, str, int], GpuSample]  # tenant, workload, replica, node, GPU


def _riders(
    metering: Metering, clock: Clock, applied: AppliedRevision, principal: Principal
) -> Riders:
    """Each shared model server's riders with their token shares; a tenant-scoped caller sees only
    itself among them."""
    servers = shared_servers(applied.spec)
    if not servers:
        return {}
    now = clock.utc_now()
    period = MeterWindow(now - timedelta(seconds=RIDER_SHARE_WINDOW_S), now)
    lines = [line for line in metering.lines(period) if line.source == "gateway"]
    riders: Riders = {}
    for server in servers:
        shares = token_shares(server, lines)
        for tenant in applied.spec.tenants:
            if not principal.is_platform and tenant.name != principal.tenant:
                continue
            for workload in tenant.workloads:
                serve = workload.serve
                if serve is None or serve.lora_of != server.id or tenant.name == server.owner:
                    continue
                share = shares.get(tenant.name)
                riders.setdefault(server.key, []).append(
                    RiderReply(
                        tenant=tenant.name,
                        workload=workload.name,
                        model=serve.model,
                        token_share=float(share)
                        if share is not None
                        else (0.0 if shares else None),
                    )
                )
    return riders


HoldingJobs = dict[tuple[str, str], Job]  # (tenant, `job-<id>`) -> the job


def _holding_jobs(jobs: JobRepository, principal: Principal) -> HoldingJobs:
    """The jobs that hold a GPU and were placed: every tenant's for the platform, else the
    caller's tenant's only."""
    own = None if principal.is_platform else principal.tenant
    return {
        (job.tenant, job_workload_name(job.id)): job
        for job in jobs.list(own, HOLDING_STATES)
        if job.placement
    }


def _live_plan(plan: Plan, jobs: HoldingJobs) -> Plan:
    """The applied plan with each holding job where the runner placed it."""
    placed = [
        job_placement(job.id, Placement.model_validate(job.placement))
        for job in jobs.values()
        if job.placement
    ]
    return with_jobs(plan, placed)


def _occupant(
    occupant: Occupant, gpu: GpuView, latest: UsedOnGpu, riders: Riders, jobs: HoldingJobs
) -> OccupantReply:
    sample = latest.get((occupant.tenant, occupant.workload, occupant.replica, gpu.node, gpu.index))
    job = jobs.get((occupant.tenant, occupant.workload))
    mig = occupant.mig
    return OccupantReply(
        tenant=occupant.tenant,
        workload=occupant.workload,
        replica=occupant.replica,
        mig_profile=mig.profile if mig else None,
        mig_start_slot=mig.start_slot if mig else None,
        mig_size_slots=mig.size_slots if mig else None,
        memory_mib=occupant.memory_mib,
        thread_percent=occupant.thread_percent,
        used_memory_mib=sample.memory_used_mib if sample else None,
        utilization_percent=sample.utilization_percent if sample else None,
        riders=riders.get((occupant.tenant, occupant.workload), []),
        job=OccupantJobReply(id=job.id, name=job.name, state=job.state) if job else None,
    )


def _visible_gpu(gpu: GpuView, principal: Principal) -> GpuView | None:
    if principal.is_platform:
        return gpu
    mine = [o for o in gpu.occupants if o.tenant == principal.tenant]
    return gpu.model_copy(update={"occupants": mine}) if mine else None


@router.get("/nodes", response_model=NodesReply)
def list_nodes(
    principal: CurrentPrincipal,
    current: Current,
    samples: Samples,
    metering: TheMetering,
    jobs: Jobs,
    clock: TheClock,
) -> NodesReply:
    require(principal, Permission.NODE_READ, principal.tenant)
    applied = current.get()
    if applied is None:
        return NodesReply(revision=None, sampled_at=None, nodes=[])
    sampled_at, latest_samples = samples.latest(principal.tenant)
    latest = {(s.tenant, s.workload, s.replica, s.node, s.gpu_index): s for s in latest_samples}
    riders = _riders(metering, clock, applied, principal)
    holding = _holding_jobs(jobs, principal)
    nodes: dict[str, list[GpuReply]] = {n.name: [] for n in applied.spec.fleet.nodes}
    for view in _live_plan(applied.plan, holding).gpus:
        gpu = _visible_gpu(view, principal)
        if gpu is None:
            continue
        nodes.setdefault(gpu.node, []).append(
            GpuReply(
                index=gpu.index,
                model=gpu.model,
                uuid=gpu.uuid,
                pool=gpu.pool,
                mode=gpu.mode.value if gpu.mode is not None else None,
                memory_mib=gpu.memory_mib,
                occupants=[_occupant(o, gpu, latest, riders, holding) for o in gpu.occupants],
            )
        )
    return NodesReply(
        revision=applied.revision,
        sampled_at=sampled_at,
        nodes=[NodeReply(name=name, gpus=gpus) for name, gpus in nodes.items() if gpus],
    )
