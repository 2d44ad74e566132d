"""What the admission rules decide over: queued jobs, what holds capacity, and the decision. Pure
values (the rules are in `gpuplex.core.queues.admission`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuplex.core.queues.drf import Resources


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting to start. `submitted_s` is on the caller's clock (seconds)."""

    id: str
    tenant: str
    ask: Resources
    priority: int = 0
    submitted_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Holding:
    """Capacity held now: a running job, or a long-running replica of the spec (never
    preempted by jobs). `stopping_for` names the job a preempted holding is stopping for."""

    id: str
    tenant: str
    resources: Resources
    priority: int = 0
    started_s: float = 0.0
    preemptible: bool = True
    stopping_for: str | None = None


@dataclass(frozen=True, slots=True)
class JobEviction:
    """Preempt `victim` so that `for_job` can start; `why` in plain words."""

    victim: str
    for_job: str
    why: str


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    admitted: tuple[str, ...]
    evictions: tuple[JobEviction, ...]
    #: per job that stays queued: why, in plain words
    waiting: Mapping[str, str] = field(default_factory=dict)
    #: per tenant whose first job that cannot start holds its later jobs back: that job's id
    held_back: Mapping[str, str] = field(default_factory=dict)
    #: per queued job the round set capacity aside for (it waits for work preempted for it, or
    #: for capacity that work being preempted frees, or it is the first guaranteed job short of
    #: capacity): what was set aside, per kind
    reserved: Mapping[str, Resources] = field(default_factory=dict)
    #: the jobs that wait only for capacity to free (no quota refuses them, nothing is preempted
    #: for them)
    short: tuple[str, ...] = ()
    #: every job the round tried to start, in the order it tried them
    order: tuple[str, ...] = ()


def queue_order(job: QueuedJob) -> tuple[int, float, str]:
    """The order a tenant's jobs start in: higher priority first, then the oldest."""
    return (-job.priority, job.submitted_s, job.id)
