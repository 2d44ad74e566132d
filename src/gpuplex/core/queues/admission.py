"""Which queued jobs start now, which running work is preempted for them, and why the rest wait.
Pure: the queue tree, what holds capacity now, the queued jobs and the tenants' decayed past usage
in; a decision out. The one set of admission rules: the job runner, the replay, the what-if of
`gpuplex queues` and (rendered as Kueue objects) Kubernetes all decide by them.

The rules, in the order they apply (Kueue's ClusterQueue/cohort semantics, on gpuplex's tree):

- Each tenant's jobs are taken in order: higher priority first, then the oldest. A tenant's first
  job that cannot start holds the tenant's later jobs back (strict FIFO inside a queue: no job
  waits forever behind a stream of smaller ones of its own queue).
- Across tenants, a job that stays inside its tenant's guarantee goes first, the tenant with the
  lowest weighted dominant share of what it holds first; then the others, by weighted dominant
  share of what each tenant holds now plus its decayed past usage as an amount held on average
  (`gpuplex.core.queues.usage`: fair share over time, with the tree's half-life, as Slurm's
  PriorityDecayHalfLife and Kueue's admission fair sharing); then the oldest job.
- No queue ever goes above its limit. A queue with `borrows: false` never goes above its own
  guarantee; the idle guarantee of a queue with `lends: false` is used by nobody outside it.
- A job inside its tenant's guarantee that does not fit reclaims: the running work of tenants
  above their own guarantee (borrowed capacity) is preempted, lowest priority first, then the
  youngest, taken from a tenant only while it is still above its guarantee (as Kueue's
  `reclaimWithinCohort`), never work younger than its queue's minimum runtime, never the spec's
  long-running replicas. A claimant never preempts back from a victim's tenant: it claimed
  inside its own guarantee, so it does not borrow. Otherwise, with `within_queue:
  lower_priority`, the tenant's own lower-priority jobs are preempted (until its queues are under
  their limits and it fits).
- Victims are chosen against the room the claim has once the work already leaving is gone: what
  earlier victims (of this round or of earlier ones, still stopping) free beyond their own
  claimants' asks is room the next claim waits for instead of preempting more. The round's
  victims are minimal: with any of them kept running, some claim the round serves would not fit
  (`gpuplex.core.queues.preemption` says it exactly).
- A job that waits for work preempted for it has its ask set aside, and so has a job inside its
  guarantee that waits for room leaving work frees, and the first job inside its guarantee that
  is short of capacity (as much of it as there is room for), so that it starts as soon as running
  work frees enough. A job beyond its guarantee that waits holds nothing: it may wait while
  smaller ones pass it, as in Kueue.
- A job whose victims are still stopping (SIGTERM, then SIGKILL after the grace period) waits for
  them and preempts nothing more.

All amounts are resource vectors (`quota_kinds.GPUS`, `quota_kinds.MIG_PREFIX + profile`, ...).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from gpuplex.core.queues.drf import EPSILON, Resources, add, fits, subtract
from gpuplex.core.queues.ledger import RoundLedger, number, who
from gpuplex.core.queues.preemption import Victim, choose_victims, spare_unneeded
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.queues.usage import TenantUsage
from gpuplex.core.queues.work import (
    AdmissionDecision,
    Holding,
    JobEviction,
    QueuedJob,
    queue_order,
)
from gpuplex.core.spec.quota_kinds import amount_words

__all__ = [
    "AdmissionDecision",
    "Holding",
    "JobEviction",
    "QueuedJob",
    "admit",
    "admit_ordered",
    "queue_order",
]

#: how many names of leaving work a reason lists before "and N more"
_NAMES_SHOWN = 3


def admit(
    tree: QueueTree,
    holdings: Sequence[Holding],
    queued: Sequence[QueuedJob],
    now_s: float,
    *,
    usage: TenantUsage | None = None,
) -> AdmissionDecision:
    """The decision for one admission round (see the module docstring for the rules), with a
    reason for every job that waits. `usage`: each tenant's decayed past usage
    (`gpuplex.core.queues.usage.decayed_usage`, kind-seconds); None: nobody used anything."""
    by_tenant: dict[str, list[QueuedJob]] = {}
    unknown: dict[str, str] = {}
    for job in queued:
        if tree.tenant(job.tenant) is None:
            unknown[job.id] = f"{job.tenant} has no queue in queues: it cannot run jobs"
        else:
            by_tenant.setdefault(job.tenant, []).append(job)
    for jobs in by_tenant.values():
        jobs.sort(key=queue_order)
    decision = admit_ordered(tree, holdings, by_tenant, now_s, usage=usage)
    waiting = {**unknown, **decision.waiting}
    for tenant, head in decision.held_back.items():
        for job in by_tenant[tenant]:
            if job.id not in waiting and job.id not in decision.admitted:
                waiting[job.id] = f"behind {head}, the first of {tenant}'s queued jobs"
    return AdmissionDecision(
        decision.admitted,
        decision.evictions,
        waiting,
        decision.held_back,
        decision.reserved,
        decision.short,
        decision.order,
    )


def admit_ordered(
    tree: QueueTree,
    holdings: Sequence[Holding],
    queues: Mapping[str, Sequence[QueuedJob]],
    now_s: float,
    *,
    usage: TenantUsage | None = None,
) -> AdmissionDecision:
    """`admit` for a caller that keeps each tenant's queued jobs in `queue_order` between rounds
    (every tenant in `queues` has a queue in the tree). A round looks at each tenant's jobs only
    up to its first that cannot start, so it costs the tenants and the jobs it starts, not
    every queued job (and, while preempted work is stopping, one look for the jobs it stops
    for). `waiting` has a reason for each job it looked at; the jobs after a tenant's first
    blocked one are held back by it (`held_back`: tenant -> that job)."""
    return _Round(RoundLedger(tree, holdings, now_s, usage)).run(queues)


class _Round:
    """One admission round: the order, and what each job it looks at gets."""

    def __init__(self, ledger: RoundLedger) -> None:
        self.ledger = ledger
        self.stopping = {
            h.stopping_for
            for mine in ledger.holdings.values()
            for h in mine
            if h.stopping_for is not None
        }
        self.claims: list[tuple[QueuedJob, Resources]] = []  # in the order they were made
        self.victims: list[Victim] = []
        self.held_for = ""  # the first guaranteed job short of capacity, if any
        self.short: list[str] = []  # the jobs that wait only for capacity to free

    def run(self, queues: Mapping[str, Sequence[QueuedJob]]) -> AdmissionDecision:
        at = dict.fromkeys(queues, 0)  # per tenant: its next job's position
        waiting: dict[str, str] = {}
        if self.stopping:  # the jobs work is stopping for come first: set their asks aside
            for jobs in queues.values():
                for job in jobs:
                    if job.id in self.stopping:
                        self._claim(job, job.ask)

        def head(tenant: str) -> QueuedJob | None:
            """The tenant's next job that could ever start; the ones before it that never
            could are told so and hold nobody back."""
            jobs = queues[tenant]
            while at[tenant] < len(jobs):
                job = jobs[at[tenant]]
                never = self._never(job)
                if never is None:
                    return job
                waiting[job.id] = f"can never start: {never}"
                at[tenant] += 1
            return None

        heap = [self._entry(job) for job in map(head, queues) if job is not None]
        heapq.heapify(heap)
        admitted: list[str] = []
        order: list[str] = []
        held_back: dict[str, str] = {}
        while heap:
            *_, tenant = heapq.heappop(heap)
            jobs = queues[tenant]
            job = jobs[at[tenant]]
            at[tenant] += 1
            order.append(job.id)
            blocked = self._try(job)
            if blocked is not None:
                waiting[job.id] = blocked
                if at[tenant] < len(jobs):
                    held_back[tenant] = job.id
                continue
            admitted.append(job.id)
            following = head(tenant)
            if following is not None:
                heapq.heappush(heap, self._entry(following))
        kept = spare_unneeded(self.ledger, self.claims, self.victims)
        if len(kept) < len(self.victims):
            waiting.update(self._preempting_reasons(kept))
        evictions = tuple(JobEviction(v.was.id, v.for_job, v.why) for v in kept)
        reserved = {job.id: dict(amount) for job, amount in self.claims}
        return AdmissionDecision(
            tuple(admitted),
            evictions,
            waiting,
            held_back,
            reserved,
            tuple(self.short),
            tuple(order),
        )

    def _entry(self, job: QueuedJob) -> tuple[int, float, float, str, str]:
        outside = 0 if self.ledger.inside_guarantee(job) else 1
        share = self.ledger.share(job.tenant, with_history=bool(outside))
        return (outside, share, job.submitted_s, job.id, job.tenant)

    def _claim(self, job: QueuedJob, amount: Resources) -> None:
        self.ledger.claim(job, amount)
        self.claims.append((job, amount))

    def _try(self, job: QueuedJob) -> str | None:
        """Admit `job` (None) or say why it waits, preempting for it where the rules allow."""
        ledger = self.ledger
        if job.id in self.stopping:
            return "waiting for the work preempted for it to stop (SIGTERM, then SIGKILL)"
        room = ledger.room_now(job.tenant)
        if fits(job.ask, room) and ledger.quota_refusal(job, now=True) is None:
            ledger.take(job)
            return None
        refused = ledger.quota_refusal(job)
        inside = ledger.inside_guarantee(job)
        if refused is None and fits(job.ask, ledger.room_soon(job.tenant)):
            if inside:  # a job beyond its guarantee claims nothing: see the module docstring
                self._claim(job, job.ask)
            return self._leaving_reason()
        victims = choose_victims(ledger, job, quota_blocked=refused is not None)
        if victims:
            for holding, why in victims:
                self.victims.append(Victim(holding, ledger.evict(holding, job.id), job.id, why))
            self._claim(job, job.ask)
            names = ", ".join(h.id for h, _ in victims)
            return f"preempting {names} for it; it starts when they stop"
        if refused is not None:
            return refused
        short = _short(job.ask, room)
        self.short.append(job.id)
        if not self.held_for and inside:
            soon = ledger.room_soon(job.tenant)
            self._claim(job, {k: min(v, max(0.0, soon.get(k, 0.0))) for k, v in job.ask.items()})
            self.held_for = job.id
            return f"next to start: waiting for {short} to free (capacity is held for it)"
        if self.claims and fits(job.ask, add(room, ledger.claimed_of_free())):
            first = self.claims[0][0].id
            return f"the free capacity is held for {first}, which is ahead of it"
        return f"the cluster is short of {short} for it"

    def _leaving_reason(self) -> str:
        leaving = [h.id for mine in self.ledger.holdings.values() for h in mine if h.stopping_for]
        shown = ", ".join(leaving[:_NAMES_SHOWN])
        if len(leaving) > _NAMES_SHOWN:
            shown += f" and {len(leaving) - _NAMES_SHOWN} more"
        return f"waiting for {shown} to stop (preempted): what they free is enough for it"

    def _preempting_reasons(self, kept: list[Victim]) -> dict[str, str]:
        """The reasons of the claims whose victims the round's pruning changed."""
        out: dict[str, str] = {}
        for job, _ in self.claims:
            mine = [v for v in self.victims if v.for_job == job.id]
            if not mine:
                continue
            left = [v.was.id for v in mine if v in kept]
            if left:
                out[job.id] = f"preempting {', '.join(left)} for it; it starts when they stop"
            else:
                out[job.id] = self._leaving_reason()
        return out

    def _never(self, job: QueuedJob) -> str | None:
        """Why `job` could not start even alone in the cluster, or None."""
        ledger = self.ledger
        capacity = ledger.tree.capacity
        over = _too_big(job.ask, capacity)
        if over is not None:
            return f"it asks more than the cluster has: {over}"
        mine = {q.name for q in ledger.path(job.tenant)}
        kept = [q for q in ledger.keep_idle if q.name not in mine]
        over = _too_big(job.ask, subtract(capacity, add(*(q.guarantee for q in kept))))
        if over is not None:
            names = ", ".join(q.name for q in kept)
            return f"it asks more than the cluster has beyond what {names} do not lend: {over}"
        for queue in ledger.path(job.tenant)[1:]:
            if queue.limit is not None and (over := _too_big(job.ask, queue.limit, named=True)):
                return f"it asks more than {who(queue)}'s limit: {over}"
            if not queue.borrows and (over := _too_big(job.ask, queue.guarantee)):
                return f"{who(queue)} does not borrow, and it asks more than its guarantee: {over}"
        return None


def _too_big(ask: Resources, bound: Resources, *, named: bool = False) -> str | None:
    """`4 GPUs asked > 3` for the first kind `ask` alone takes past `bound`, else None (`named`:
    a kind `bound` does not name is not bound)."""
    for kind, amount in ask.items():
        if named and kind not in bound:
            continue
        if amount > bound.get(kind, 0.0) + EPSILON:
            return f"{amount_words(amount, kind)} asked > {number(bound.get(kind, 0.0))}"
    return None


def _short(ask: Resources, room: Resources) -> str:
    parts = [
        amount_words(v - room.get(k, 0.0), k)
        for k, v in ask.items()
        if v > room.get(k, 0.0) + EPSILON
    ]
    return ", ".join(parts) or "capacity"
