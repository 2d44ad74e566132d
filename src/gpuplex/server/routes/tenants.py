"""Tenants and their workloads, as the applied spec declares them and the plan placed them, with
their jobs: how many wait and run, and what the running ones hold (part of `allocated`, which the
tenant's quota binds)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gpuplex.core.access import Permission, Principal, visible_tenants
from gpuplex.core.jobs.states import ACTIVE_STATES, JobState
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.spec import TenantSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.revision import AppliedRevision, AppliedRevisions
from gpuplex.server.auth import CurrentPrincipal, no_such_tenant, require
from gpuplex.server.dependencies import Current, Jobs
from gpuplex.server.pages import Cursor, Limit, Page, page_of
from gpuplex.server.problems import ERROR_RESPONSES
from gpuplex.store.jobs import JobRepository

router = APIRouter(tags=["tenants"], responses=ERROR_RESPONSES)


class AllocationReply(BaseModel):
    """What the tenant holds: its replicas as the plan placed them and its jobs that hold a GPU
    (its quota binds both: the runner places jobs with the spec's planner)."""

    replicas_placed: int
    replicas_pending: int
    gpus: float  # compute share in GPUs: a whole GPU 1, a 3g.40gb slice 3/7, an MPS 20 % share 0.2
    memory_mib: int
    mig: dict[str, int]  # slices per MIG profile


class TenantJobsReply(BaseModel):
    """The tenant's jobs not finished: how many wait, how many hold capacity (starting, running
    or being stopped), and what those hold (their part of `allocated`)."""

    queued: int = 0
    holding: int = 0
    gpus: float = 0.0
    memory_mib: int = 0
    mig: dict[str, int] = Field(default_factory=dict)


class TenantReply(BaseModel):
    name: str
    tier: str
    priority: int
    weight: int
    isolation: str
    regulated: bool
    quota: dict[str, Any]
    rate_limits: dict[str, Any]
    monthly_budget: str | None
    workloads: int
    allocated: AllocationReply
    #: the model servers (`tenant/workload`) its LoRA adapters ride on: it pays its share of them
    rides_on: list[str] = []
    jobs: TenantJobsReply = Field(default_factory=TenantJobsReply)


class WorkloadReply(BaseModel):
    tenant: str
    name: str
    kind: str
    pattern: str
    replicas: int
    model: str | None
    modes: list[str]  # the isolation mode the plan chose
    placed: int
    pending_reasons: list[str]


def allocation_of(plan: Plan, tenant: str, jobs: Sequence[Placement] = ()) -> AllocationReply:
    """What `tenant`'s replicas in `plan` and its `jobs` (their placements) hold."""
    replicas = [p for p in plan.placements if p.tenant == tenant]
    placed = replicas + [p for p in jobs if p.tenant == tenant]
    mig: dict[str, int] = {}
    for placement in placed:
        if placement.mig is not None:
            mig[placement.mig.profile] = mig.get(placement.mig.profile, 0) + 1
    return AllocationReply(
        replicas_placed=len(replicas),
        replicas_pending=sum(1 for i in plan.infeasible if i.tenant == tenant),
        gpus=round(sum(p.compute_percent for p in placed) / 100, 4),
        memory_mib=sum(p.memory_mib for p in placed),
        mig=mig,
    )


@dataclass(frozen=True, slots=True)
class TenantsJobs:
    """The jobs not finished of the tenants asked about: per tenant its counts, and the
    placements of those that hold a GPU."""

    counts: dict[str, TenantJobsReply]
    placements: list[Placement]

    def of(self, tenant: str) -> TenantJobsReply:
        return self.counts.get(tenant) or TenantJobsReply()


def tenants_jobs(jobs: JobRepository, tenant: str | None) -> TenantsJobs:
    """Every tenant's jobs not finished, or only `tenant`'s."""
    counts: dict[str, TenantJobsReply] = {}
    placements: list[Placement] = []
    for job in jobs.list(tenant, ACTIVE_STATES):
        mine = counts.setdefault(job.tenant, TenantJobsReply())
        if job.state is JobState.QUEUED:
            mine.queued += 1
            continue
        mine.holding += 1
        if job.placement is None:
            continue
        placement = Placement.model_validate(job.placement)
        placements.append(placement)
        mine.gpus = round(mine.gpus + placement.compute_percent / 100, 4)
        mine.memory_mib += placement.memory_mib
        if placement.mig is not None:
            mine.mig[placement.mig.profile] = mine.mig.get(placement.mig.profile, 0) + 1
    return TenantsJobs(counts, placements)


def tenant_reply(tenant: TenantSpec, plan: Plan, jobs: TenantsJobs | None = None) -> TenantReply:
    """The tenant as the spec declares it, with what its replicas in `plan` and its `jobs`
    hold."""
    jobs = jobs or TenantsJobs({}, [])
    return TenantReply(
        name=tenant.name,
        tier=tenant.tier.value,
        priority=tenant.priority,
        weight=tenant.weight,
        isolation=tenant.isolation.value,
        regulated=tenant.regulated,
        quota=tenant.quota.model_dump(mode="json", exclude_none=True),
        rate_limits=tenant.rate_limits.model_dump(mode="json", exclude_none=True),
        monthly_budget=str(tenant.monthly_budget) if tenant.monthly_budget is not None else None,
        workloads=len(tenant.workloads),
        allocated=allocation_of(plan, tenant.name, jobs.placements),
        rides_on=sorted(
            {w.serve.lora_of for w in tenant.workloads if w.serve is not None and w.serve.lora_of}
        ),
        jobs=jobs.of(tenant.name),
    )


def redact_tenants(text: str, principal: Principal, tenants: list[str]) -> str:
    """`text` with every tenant but the caller's own named `another tenant` (platform admins see it
    as it is): the planner's reasons name the tenant in the way, which is not the caller's to know.
    """
    if principal.is_platform:
        return text
    for name in sorted((t for t in tenants if t != principal.tenant), key=len, reverse=True):
        # the tenant, or one of its replicas (`tenant/workload#n`): workload names are theirs too
        pattern = rf"(?<![\w.-]){re.escape(name)}(?:/[\w.-]+(?:#\d+)?)?(?![\w-])"
        text = re.sub(pattern, "another tenant", text)
    return text


def applied_tenant(
    current: AppliedRevisions, name: str, principal: Principal | None = None
) -> tuple[AppliedRevision, TenantSpec]:
    """The applied spec and the named tenant in it; 404 when there is none (check RBAC first).
    A platform `principal`, who may see every tenant, is told the closest name it may have
    meant; nobody else is (a tenant's caller must not learn other tenants' names)."""
    applied = current.get()
    tenant = applied.tenant(name) if applied is not None else None
    if applied is None or tenant is None:
        known = applied.tenant_names if applied is not None else []
        hint = did_you_mean(name, known) if principal is not None and principal.is_platform else ""
        raise no_such_tenant(name, hint)
    return applied, tenant


@router.get("/tenants", response_model=Page[TenantReply])
def list_tenants(
    principal: CurrentPrincipal,
    current: Current,
    jobs: Jobs,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[TenantReply]:
    """The tenants the caller may see: every one for a platform admin, else their own."""
    applied = current.get()
    if applied is None:
        return page_of([], limit, cursor)
    names = set(visible_tenants(principal, applied.tenant_names))
    held = tenants_jobs(jobs, None if principal.is_platform else principal.tenant)
    items = [tenant_reply(t, applied.plan, held) for t in applied.spec.tenants if t.name in names]
    return page_of(items, limit, cursor)


@router.get("/tenants/{tenant}", response_model=TenantReply)
def get_tenant(
    tenant: str, principal: CurrentPrincipal, current: Current, jobs: Jobs
) -> TenantReply:
    require(principal, Permission.TENANT_READ, tenant)
    applied, found = applied_tenant(current, tenant, principal)
    return tenant_reply(found, applied.plan, tenants_jobs(jobs, tenant))


@router.get("/tenants/{tenant}/workloads", response_model=Page[WorkloadReply])
def list_workloads(
    tenant: str,
    principal: CurrentPrincipal,
    current: Current,
    limit: Limit = 100,
    cursor: Cursor = None,
) -> Page[WorkloadReply]:
    require(principal, Permission.TENANT_READ, tenant)
    applied, found = applied_tenant(current, tenant)
    plan = applied.plan
    items = []
    for workload in found.workloads:
        mine = [p for p in plan.placements if p.tenant == tenant and p.workload == workload.name]
        pending = [i for i in plan.infeasible if i.tenant == tenant and i.workload == workload.name]
        items.append(
            WorkloadReply(
                tenant=tenant,
                name=workload.name,
                kind=workload.kind.value,
                pattern=workload.pattern.value,
                replicas=workload.replicas,
                model=workload.serve.model if workload.serve is not None else None,
                modes=sorted({p.mode.value for p in mine}),
                placed=len(mine),
                pending_reasons=[
                    redact_tenants(reason, principal, applied.tenant_names)
                    for item in pending
                    for reason in item.reasons
                ],
            )
        )
    return page_of(items, limit, cursor)
