"""`queues:` in gpuplex.yaml: organisation -> team -> tenant quota queues for jobs and replicas.

Each queue has a guarantee (capacity it may always get back), an optional limit (never exceeded), a
weight (its share of what is left above the guarantees), whether it lends its idle guarantee to
others and whether it borrows beyond its own guarantee, and preemption rules (reclaim borrowed
capacity for a guarantee; preempt lower priority work inside the queue; the minimum runtime before
a workload may be preempted; the grace period between SIGTERM and SIGKILL). Amounts are those of a
tenant's `quota`: whole GPUs, shared GPU memory and compute, and MIG slices per profile.

`max_active_jobs` caps how many jobs a tenant may have that have not finished (queued, starting,
running or preempting), and `max_submits_per_minute` how many it may submit in any 60 seconds
(finished jobs stay in the store: without it, submitting and cancelling in a loop would grow it
without end). Both are set once for every tenant under `queues:`, and per tenant's queue to
override them. A submit past either is refused (`too_many_jobs`), so no tenant floods the store.

`fair_sharing.half_life_s` is how long fair sharing remembers: above the guarantees, the tenant
with the least weighted usage goes first, its past usage decayed by half per half-life (0: only
what it holds now counts).

    queues:
      preemption: {reclaim: true, within_queue: lower_priority, min_runtime_s: 300, grace_s: 30}
      fair_sharing: {half_life_s: 86400}
      max_active_jobs: 1000      # per tenant; a tenant's queue may set its own
      max_submits_per_minute: 600
      organisations:
        - name: acme
          guarantee: {gpus: 8}
          teams:
            - name: research
              guarantee: {gpus: 6}
              tenants:
                - name: contoso          # a tenant of this spec
                  guarantee: {gpus: 4, mig: {1g.10gb: 2}}
                  limit: {gpus: 8}
                  weight: 2
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import Field, StrictFloat, StrictInt

from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.tenants import QuotaSpec


class WithinQueue(StrEnum):
    """Whether a job may preempt its own queue's running work."""

    NEVER = "never"
    LOWER_PRIORITY = "lower_priority"  # a higher-priority job preempts lower-priority ones


class PreemptionSpec(SpecModel):
    """How work is taken back. Unset fields inherit the parent queue's, then these defaults."""

    reclaim: bool | None = Field(
        default=None, description="A job inside its guarantee preempts borrowed work (default on)."
    )
    within_queue: WithinQueue | None = Field(
        default=None, description="never, or lower_priority (default: lower_priority)."
    )
    min_runtime_s: StrictFloat | StrictInt | None = Field(
        default=None, ge=0, description="No workload is preempted before this (default 300 s)."
    )
    grace_s: StrictFloat | StrictInt | None = Field(
        default=None, ge=0, le=3600, description="SIGTERM to SIGKILL (default 30 s)."
    )


#: How long fair sharing remembers when `queues.fair_sharing` does not say: a day.
DEFAULT_HALF_LIFE_S = 86_400
#: The longest half-life accepted: a year (usage older than 8 half-lives is not kept).
MAX_HALF_LIFE_S = 365 * 86_400


class FairSharingSpec(SpecModel):
    """How the order above the guarantees remembers past usage."""

    half_life_s: StrictFloat | StrictInt = Field(
        default=DEFAULT_HALF_LIFE_S,
        ge=0,
        le=MAX_HALF_LIFE_S,
        description="Past usage counts half after this long (0: only what is held now).",
    )


class QueueSpec(SpecModel):
    """What every level of the tree has."""

    name: DnsLabel
    guarantee: QuotaSpec = Field(default_factory=QuotaSpec)
    limit: QuotaSpec | None = Field(default=None, description="Never above this (unset: none).")
    weight: StrictInt = Field(default=1, ge=1, le=1000, description="Share above guarantees.")
    lend: bool = Field(default=True, description="Others may borrow its idle guarantee.")
    borrow: bool = Field(default=True, description="It may use more than its guarantee.")
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)


#: Jobs a tenant may have not finished yet, and submit in any 60 s, when `queues:` does not say.
DEFAULT_MAX_ACTIVE_JOBS = 1000
DEFAULT_MAX_SUBMITS_PER_MINUTE = 600
MAX_JOBS_BOUND = 1_000_000


@dataclass(frozen=True, slots=True)
class JobCaps:
    """How many jobs one tenant may have not finished at once, and submit in any 60 s."""

    max_active: int
    max_submits_per_minute: int


class TenantQueueSpec(QueueSpec):
    """A leaf: `name` is a tenant of the spec."""

    max_active_jobs: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_JOBS_BOUND,
        description="Jobs of this tenant not finished yet, at most (unset: queues' own).",
    )
    max_submits_per_minute: StrictInt | None = Field(
        default=None,
        ge=0,
        le=MAX_JOBS_BOUND,
        description="Jobs this tenant may submit in any 60 s (unset: queues' own).",
    )


class TeamQueueSpec(QueueSpec):
    tenants: list[TenantQueueSpec] = Field(default_factory=list)


class OrganisationQueueSpec(QueueSpec):
    teams: list[TeamQueueSpec] = Field(default_factory=list)


class QueuesSpec(SpecModel):
    preemption: PreemptionSpec = Field(default_factory=PreemptionSpec)
    fair_sharing: FairSharingSpec = Field(default_factory=FairSharingSpec)
    max_active_jobs: StrictInt = Field(
        default=DEFAULT_MAX_ACTIVE_JOBS,
        ge=0,
        le=MAX_JOBS_BOUND,
        description="Per tenant: jobs not finished yet (queued, starting, running), at most.",
    )
    max_submits_per_minute: StrictInt = Field(
        default=DEFAULT_MAX_SUBMITS_PER_MINUTE,
        ge=0,
        le=MAX_JOBS_BOUND,
        description="Per tenant: jobs submitted in any 60 s, at most.",
    )
    organisations: list[OrganisationQueueSpec] = Field(default_factory=list)

    @property
    def enabled(self) -> bool:
        return bool(self.organisations)

    def job_caps_of(self, tenant: str) -> JobCaps:
        """What `tenant` may submit: its queue's own caps where it sets them, else the queues'
        (a tenant without a queue cannot submit at all)."""
        leaf = next(
            (
                leaf
                for organisation in self.organisations
                for team in organisation.teams
                for leaf in team.tenants
                if leaf.name == tenant
            ),
            None,
        )
        active = leaf.max_active_jobs if leaf is not None else None
        per_minute = leaf.max_submits_per_minute if leaf is not None else None
        return JobCaps(
            max_active=self.max_active_jobs if active is None else active,
            max_submits_per_minute=self.max_submits_per_minute
            if per_minute is None
            else per_minute,
        )
