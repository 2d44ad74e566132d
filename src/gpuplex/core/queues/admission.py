"""Which queued jobs start now, which running work is preempted for them, and why the rest wait.
Pure: the queue tree, what holds capacity now and the queued jobs in; a decision out.

The rules, in the order they apply (Kueue's ClusterQueue/cohort semantics, on gpuplex's tree):

- Each tenant's jobs are taken in order: higher priority first, then the oldest. A tenant's first
  job that cannot start holds the tenant's later jobs back (strict FIFO inside a queue: no job
  waits forever behind a stream of smaller ones of its own queue).
- Across tenants, a job that stays inside its tenant's guarantee goes first; then the tenant with
  the lowest weighted dominant share (DRF over the kinds of GPU capacity), then the oldest job.
- No queue ever goes above its limit. A queue with `borrows: false` never goes above its own
  guarantee; the idle guarantee of a queue with `lends: false` is used by nobody outside it.
- A job inside its tenant's guarantee that does not fit reclaims: the running work of tenants
  above their own guarantee (borrowed capacity) is preempted, lowest priority first, then the
  youngest, taken from a tenant only while it is still above its guarantee (as Kueue's
  `reclaimWithinCohort`), never work younger than its queue's minimum runtime, never the spec's
  long-running replicas; the set is pruned to a minimal one. A claimant never preempts back from
  a victim's tenant: it claimed inside its own guarantee, so it does not borrow. Otherwise, with
  `within_queue: lower_priority`, the tenant's own lower-priority jobs are preempted (the minimal
  set that brings its queues under their limits and it within the free capacity).
- The first job inside its guarantee that is short of free capacity has it held: later jobs only
  get what is free beyond it, so it starts as soon as running work frees enough. A job beyond
  its guarantee holds nothing: it may wait while smaller ones pass it, as in Kueue.
- A job whose victims are still stopping (SIGTERM, then SIGKILL after the grace period) waits for
  them and preempts nothing more.

All amounts are resource vectors (`tree.GPUS`, `tree.MIG_PREFIX + profile`, ...).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuplex.core.queues.amounts import amount_words
from gpuplex.core.queues.drf import EPSILON, Resources, add, fits, subtract
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.spec.queues import WithinQueue


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
class Eviction:
    """Preempt `victim` so that `for_job` can start; `why` in plain words."""

    victim: str
    for_job: str
    why: str


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    admitted: tuple[str, ...]
    evictions: tuple[Eviction, ...]
    #: per job that stays queued: why, in plain words
    waiting: Mapping[str, str] = field(default_factory=dict)
    #: per tenant whose first job that cannot start holds its later jobs back: that job's id
    held_back: Mapping[str, str] = field(default_factory=dict)


def queue_order(job: QueuedJob) -> tuple[int, float, str]:
    """The order a tenant's jobs start in: higher priority first, then the oldest."""
    return (-job.priority, job.submitted_s, job.id)


def admit(
    tree: QueueTree, holdings: Sequence[Holding], queued: Sequence[QueuedJob], now_s: float
) -> AdmissionDecision:
    """The decision for one admission round (see the module docstring for the rules), with a
    reason for every job that waits."""
    by_tenant: dict[str, list[QueuedJob]] = {}
    unknown: dict[str, str] = {}
    for job in queued:
        if tree.tenant(job.tenant) is None:
            unknown[job.id] = f"{job.tenant} has no queue in queues: it cannot run jobs"
        else:
            by_tenant.setdefault(job.tenant, []).append(job)
    for jobs in by_tenant.values():
        jobs.sort(key=queue_order)
    decision = admit_ordered(tree, holdings, by_tenant, now_s)
    waiting = {**unknown, **decision.waiting}
    for tenant, head in decision.held_back.items():
        for job in by_tenant[tenant]:
            if job.id not in waiting and job.id not in decision.admitted:
                waiting[job.id] = f"behind {head}, the first of {tenant}'s queued jobs"
    return AdmissionDecision(decision.admitted, decision.evictions, waiting, decision.held_back)


def admit_ordered(
    tree: QueueTree,
    holdings: Sequence[Holding],
    queues: Mapping[str, Sequence[QueuedJob]],
    now_s: float,
) -> AdmissionDecision:
    """`admit` for a caller that keeps each tenant's queued jobs in `queue_order` between rounds
    (every tenant in `queues` has a queue in the tree). A round looks at each tenant's jobs only
    up to its first that cannot start, so it costs the tenants and the jobs it starts, not
    every queued job. `waiting` has a reason for each job it looked at; the jobs after a
    tenant's first blocked one are held back by it (`held_back`: tenant -> that job)."""
    return _Round(tree, holdings, now_s).run(queues)


class _Round:
    """One admission round's running totals."""

    def __init__(self, tree: QueueTree, holdings: Sequence[Holding], now_s: float) -> None:
        self.tree = tree
        self.now_s = now_s
        self.holdings: dict[str, list[Holding]] = {}  # by tenant
        for holding in holdings:
            self.holdings.setdefault(holding.tenant, []).append(holding)
        self.usage: dict[str, dict[str, float]] = {q.name: {} for q in tree.root.walk()}
        for holding in holdings:
            self._add(holding.tenant, holding.resources)
        self.free = subtract(tree.capacity, self.usage[tree.root.name])
        self.reserved: dict[str, float] = {}
        self.reserved_for = ""  # the guaranteed claim free capacity is held for, if any
        self.stopping = {h.stopping_for for h in holdings if h.stopping_for is not None}
        self.kinds = [k for k, v in tree.capacity.items() if v > EPSILON]
        self.keep_idle = [q for q in tree.root.walk() if not q.lends and q is not tree.root]

    # -- bookkeeping ----------------------------------------------------------------------------

    def _path(self, tenant: str) -> tuple[QueueNode, ...]:
        return self.tree.paths[tenant]

    def _add(self, tenant: str, amount: Resources) -> None:
        path = self.tree.paths.get(tenant)
        if path is None:  # a tenant outside the tree holds capacity, but no queue of its own
            path = (self.tree.root,)
        for queue in path:
            used = self.usage[queue.name]  # in place: a round adds every holding up
            for kind, value in amount.items():
                used[kind] = used.get(kind, 0.0) + value

    def _share(self, tenant: str) -> float:
        """The tenant's dominant share of the capacity, over its weight."""
        used = self.usage[tenant]
        cap = self.tree.capacity
        share = max((used.get(k, 0.0) / cap[k] for k in self.kinds), default=0.0)
        return share / self._path(tenant)[-1].weight

    def _inside_guarantee(self, job: QueuedJob) -> bool:
        own = self._path(job.tenant)[-1]
        after = add(self.usage[job.tenant], job.ask)
        return all(
            after.get(k, 0.0) <= own.guarantee.get(k, 0.0) + EPSILON
            for k, v in job.ask.items()
            if v > EPSILON
        )

    # -- the round ------------------------------------------------------------------------------

    def run(self, queues: Mapping[str, Sequence[QueuedJob]]) -> AdmissionDecision:
        at = dict.fromkeys(queues, 0)  # per tenant: its next job's position
        waiting: dict[str, str] = {}

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
        evictions: list[Eviction] = []
        held_back: dict[str, str] = {}
        while heap:
            *_, tenant = heapq.heappop(heap)
            jobs = queues[tenant]
            job = jobs[at[tenant]]
            at[tenant] += 1
            blocked = self._try(job, admitted, evictions)
            if blocked is not None:
                waiting[job.id] = blocked
                if at[tenant] < len(jobs):
                    held_back[tenant] = job.id
                continue
            following = head(tenant)
            if following is not None:
                heapq.heappush(heap, self._entry(following))
        return AdmissionDecision(tuple(admitted), tuple(evictions), waiting, held_back)

    def _entry(self, job: QueuedJob) -> tuple[int, float, float, str, str]:
        outside = 0 if self._inside_guarantee(job) else 1
        return (outside, self._share(job.tenant), job.submitted_s, job.id, job.tenant)

    def _try(self, job: QueuedJob, admitted: list[str], evictions: list[Eviction]) -> str | None:
        """Admit `job` (None) or say why it waits, preempting for it where the rules allow."""
        if job.id in self.stopping:
            return "waiting for the work preempted for it to stop (SIGTERM, then SIGKILL)"
        refused = self._quota_refusal(job)
        inside = self._inside_guarantee(job)
        room = self._room_for(job.tenant)
        if refused is None and fits(job.ask, room):
            self._take(job)
            admitted.append(job.id)
            return None
        victims = self._victims(job, quota_blocked=refused is not None)
        if refused is not None and not victims:
            return refused
        if victims:
            for victim, why in victims:
                evictions.append(Eviction(victim.id, job.id, why))
                mine = self.holdings[victim.tenant]
                mine[mine.index(victim)] = replace(victim, stopping_for=job.id)
            self.reserved = add(self.reserved, job.ask)  # what its victims free is its own
            names = ", ".join(v.id for v, _ in victims)
            return f"preempting {names} for it; it starts when they stop"
        short = _short(job.ask, room)
        if inside and not self.reserved_for:
            self.reserved = add(self.reserved, job.ask)
            self.reserved_for = job.id
            return f"next to start: waiting for {short} to free (capacity is held for it)"
        if self.reserved_for and fits(job.ask, add(room, self.reserved)):
            return f"the free capacity is held for {self.reserved_for}, which is ahead of it"
        return f"the cluster is short of {short} for it"

    def _take(self, job: QueuedJob) -> None:
        self._add(job.tenant, job.ask)
        self.free = subtract(self.free, job.ask)
        # admitted this round: not started yet, so not preemptible in it
        self.holdings.setdefault(job.tenant, []).append(
            Holding(job.id, job.tenant, job.ask, job.priority, self.now_s, preemptible=False)
        )

    def _never(self, job: QueuedJob) -> str | None:
        """Why `job` could not start even alone in the cluster, or None."""
        over = _too_big(job.ask, self.tree.capacity)
        if over is not None:
            return f"it asks more than the cluster has: {over}"
        mine = {q.name for q in self._path(job.tenant)}
        kept = [q for q in self.keep_idle if q.name not in mine]
        over = _too_big(job.ask, subtract(self.tree.capacity, add(*(q.guarantee for q in kept))))
        if over is not None:
            names = ", ".join(q.name for q in kept)
            return f"it asks more than the cluster has beyond what {names} do not lend: {over}"
        for queue in self._path(job.tenant)[1:]:
            if queue.limit is not None and (over := _too_big(job.ask, queue.limit, named=True)):
                return f"it asks more than {_who(queue)}'s limit: {over}"
            if not queue.borrows and (over := _too_big(job.ask, queue.guarantee)):
                return f"{_who(queue)} does not borrow, and it asks more than its guarantee: {over}"
        return None

    def _quota_refusal(self, job: QueuedJob, less: Resources | None = None) -> str | None:
        """Why the queues refuse `job` whatever is free: a limit, or a queue that does not
        borrow; None when they allow it. `less`: work of the job's tenant that would be gone."""
        for queue in self._path(job.tenant)[1:]:
            after = add(subtract(self.usage[queue.name], less or {}), job.ask)
            if queue.limit is not None:
                over = _over(after, queue.limit, job.ask, named=True)
                if over is not None:
                    return f"{_who(queue)} would pass its limit: {over}"
            if not queue.borrows:
                over = _over(after, queue.guarantee, job.ask)
                if over is not None:
                    return f"{_who(queue)} does not borrow and would pass its guarantee: {over}"
        return None

    def _room_for(self, tenant: str) -> dict[str, float]:
        """What `tenant` may use now: the free capacity, less what is held for an earlier job,
        less the idle guarantees of queues that do not lend and are not the tenant's own."""
        room = subtract(self.free, self.reserved)
        mine = {q.name for q in self._path(tenant)}
        for queue in self.keep_idle:
            if queue.name in mine:
                continue
            idle = {
                k: max(0.0, v - self.usage[queue.name].get(k, 0.0))
                for k, v in queue.guarantee.items()
            }
            room = subtract(room, idle)
        return room

    # -- preemption -----------------------------------------------------------------------------

    def _victims(self, job: QueuedJob, *, quota_blocked: bool) -> list[tuple[Holding, str]]:
        """The minimal set of running work to preempt for `job`, with why; empty when the rules
        allow none that would make it fit. When the tenant's own queues (a limit, or a queue that
        does not borrow) stop it, only its own lower-priority work can help."""
        own = self._path(job.tenant)[-1]
        inside = self._inside_guarantee(job)
        room = self._room_for(job.tenant)
        if not quota_blocked and own.preemption.reclaim and inside:
            lenders = [t for t in self.holdings if t != job.tenant and self._above_guarantee(t)]
            chosen = self._pick(job, room, self._preemptible(lenders), reclaim=True)
            if chosen:
                why = f"reclaimed for {job.id}: {job.tenant} is inside its guarantee"
                return [(h, why) for h in chosen]
        if own.preemption.within_queue is WithinQueue.LOWER_PRIORITY:
            mine = [h for h in self._preemptible([job.tenant]) if h.priority < job.priority]
            chosen = self._pick(job, room, mine, reclaim=False)
            if chosen:
                why = f"preempted by {job.id}, a higher-priority job of {job.tenant}"
                return [(h, why) for h in chosen]
        return []

    def _preemptible(self, tenants: list[str]) -> list[Holding]:
        """The holdings of `tenants` that may be preempted now."""
        out = []
        for tenant in tenants:
            path = self.tree.paths.get(tenant)
            if path is None:
                continue
            min_runtime_s = path[-1].preemption.min_runtime_s
            out += [
                h
                for h in self.holdings.get(tenant, ())
                if h.preemptible
                and h.stopping_for is None
                and self.now_s - h.started_s >= min_runtime_s
            ]
        return out

    def _above_guarantee(self, tenant: str) -> bool:
        if tenant not in self.tree.paths:  # a tenant without a queue holds only replicas
            return False
        guarantee = self._path(tenant)[-1].guarantee
        return any(v > guarantee.get(k, 0.0) + EPSILON for k, v in self.usage[tenant].items())

    def _pick(
        self, job: QueuedJob, room: Resources, candidates: list[Holding], *, reclaim: bool
    ) -> list[Holding]:
        """Lowest priority first, then the youngest, taking only work that helps; then pruned to
        a minimal set. Empty when even all of them would not do. Reclaimed work is taken from a
        tenant only while it is above its own guarantee; the tenant's own work, once gone, also
        lowers what its queues' limits count."""

        def enough(chosen: list[Holding]) -> bool:
            freed = add(*(h.resources for h in chosen))
            if not fits(job.ask, add(room, freed)):
                return False
            return reclaim or self._quota_refusal(job, less=freed) is None

        ordered = sorted(candidates, key=lambda h: (h.priority, -h.started_s, h.id))
        chosen: list[Holding] = []
        for holding in ordered:
            if enough(chosen):
                break
            helps = any(
                job.ask.get(k, 0.0) > EPSILON and v > EPSILON for k, v in holding.resources.items()
            )
            if helps and (not reclaim or self._still_borrowing(holding.tenant, chosen)):
                chosen.append(holding)
        if not chosen or not enough(chosen):
            return []
        for holding in reversed(list(chosen)):
            rest = [h for h in chosen if h is not holding]
            if enough(rest):
                chosen = rest
        return chosen

    def _still_borrowing(self, tenant: str, chosen: list[Holding]) -> bool:
        """Whether `tenant` is still above its own guarantee with `chosen` gone: borrowed work is
        taken from a tenant only while it borrows (as Kueue's reclaimWithinCohort does)."""
        taken = add(*(h.resources for h in chosen if h.tenant == tenant))
        held = subtract(self.usage[tenant], taken)
        guarantee = self._path(tenant)[-1].guarantee
        return any(v > guarantee.get(k, 0.0) + EPSILON for k, v in held.items())


def _over(after: Resources, bound: Resources, ask: Resources, *, named: bool = False) -> str | None:
    """The first kind `ask` takes past `bound` (`after` is the usage with it), in words. With
    `named`, a kind `bound` does not name is not bound (a limit binds only the kinds it names; a
    guarantee that leaves a kind out guarantees none of it)."""
    for kind, amount in ask.items():
        if amount <= EPSILON or (named and kind not in bound):
            continue
        if after.get(kind, 0.0) > bound.get(kind, 0.0) + EPSILON:
            return (
                f"{amount_words(after[kind] - amount, kind)} held + {_number(amount)} asked > "
                f"{_number(bound.get(kind, 0.0))}"
            )
    return None


def _too_big(ask: Resources, bound: Resources, *, named: bool = False) -> str | None:
    """`4 GPUs asked > 3` for the first kind `ask` alone takes past `bound`, else None (`named`:
    as `_over`)."""
    for kind, amount in ask.items():
        if named and kind not in bound:
            continue
        if amount > bound.get(kind, 0.0) + EPSILON:
            return f"{amount_words(amount, kind)} asked > {_number(bound.get(kind, 0.0))}"
    return None


def _short(ask: Resources, room: Resources) -> str:
    parts = [
        amount_words(v - room.get(k, 0.0), k)
        for k, v in ask.items()
        if v > room.get(k, 0.0) + EPSILON
    ]
    return ", ".join(parts) or "capacity"


def _who(queue: QueueNode) -> str:
    return queue.name if queue.level == "tenant" else f"{queue.level} {queue.name}"


def _number(value: float) -> str:
    return f"{value:g}"
