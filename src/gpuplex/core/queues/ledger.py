"""One admission round's running totals: what each queue holds now, what of that is leaving, what
waiting jobs have claimed, and the room a tenant has now and once the leaving work is gone. Pure.

Two moments matter in a round. *Now*: a job starts if it fits the free capacity, less what
waiting jobs claimed beyond what leaving work frees. *Soon*: once the work being preempted (its
holdings carry `stopping_for`, or the round just evicted them) has stopped and the jobs waiting
for it have started. A job that waits claims its ask against the soon state: the claims of a
round add up, and what a victim frees beyond its claimant's ask is room the next claimant has
without preempting more (`room_soon`).

Preempted work goes back to its tenant's queue at its old place once it has stopped. So for a
job's own queues (its guarantee, its limits) only the leaving work that will queue behind it
counts as gone: its own tenant's lower-priority jobs. Other leaving work of its tenant, or of its
team's other tenants, still counts there: it comes back to its queue, maybe ahead of the job.
Queues' limits are checked at both moments for a job that starts now, and at the soon one for a
job that waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuplex.core.queues.drf import EPSILON, Resources, add, subtract
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.queues.usage import TenantUsage, usage_level
from gpuplex.core.queues.work import Holding, QueuedJob
from gpuplex.core.spec.quota_kinds import amount_words

#: per queue name: an amount per kind
PerQueue = dict[str, dict[str, float]]


class RoundLedger:
    """The totals one round keeps as it admits, claims and evicts."""

    def __init__(
        self,
        tree: QueueTree,
        holdings: Sequence[Holding],
        now_s: float,
        usage: TenantUsage | None = None,
    ) -> None:
        self.tree = tree
        self.now_s = now_s
        self.holdings: dict[str, list[Holding]] = {}  # by tenant
        names = [q.name for q in tree.root.walk()]
        self.usage: PerQueue = {name: {} for name in names}  # held now
        self.leaving: PerQueue = {name: {} for name in names}  # held now, stopping
        self.claimed: PerQueue = {name: {} for name in names}  # set aside for waiting jobs
        self.leaving_of: dict[str, list[Holding]] = {}  # per tenant: its holdings that leave
        for holding in holdings:
            self.holdings.setdefault(holding.tenant, []).append(holding)
            self._add(self.usage, holding.tenant, holding.resources)
            if holding.stopping_for is not None:
                self._add(self.leaving, holding.tenant, holding.resources)
                self.leaving_of.setdefault(holding.tenant, []).append(holding)
        self.free = subtract(tree.capacity, self.usage[tree.root.name])
        self.kinds = [k for k, v in tree.capacity.items() if v > EPSILON]
        self.keep_idle = [q for q in tree.root.walk() if not q.lends and q is not tree.root]
        #: per tenant: its decayed past usage as an amount held on average, and what it holds
        #: for good (the spec's replicas); None without a usage or a half-life (no memory)
        self.history: dict[str, dict[str, float]] | None = None
        if usage is not None and tree.half_life_s > 0:
            self.history = {
                tenant: {kind: usage_level(v, tree.half_life_s) for kind, v in amounts.items()}
                for tenant, amounts in usage.items()
            }
            for holding in holdings:
                if not holding.preemptible and holding.stopping_for is None:
                    mine = self.history.setdefault(holding.tenant, {})
                    for kind, value in holding.resources.items():
                        mine[kind] = mine.get(kind, 0.0) + value
        self.admitted: dict[str, dict[str, float]] = {}  # per tenant: started in this round

    # -- the tree -------------------------------------------------------------------------------

    def path(self, tenant: str) -> tuple[QueueNode, ...]:
        return self.tree.paths[tenant]

    def _add(self, into: PerQueue, tenant: str, amount: Resources, sign: float = 1.0) -> None:
        path = self.tree.paths.get(tenant)
        if path is None:  # a tenant outside the tree holds capacity, but no queue of its own
            path = (self.tree.root,)
        for queue in path:
            totals = into[queue.name]  # in place: a round adds every holding up
            for kind, value in amount.items():
                totals[kind] = totals.get(kind, 0.0) + sign * value

    def soon(self, queue: str) -> dict[str, float]:
        """What `queue` holds once its leaving work is gone and its waiting jobs started."""
        return add(subtract(self.usage[queue], self.leaving[queue]), self.claimed[queue])

    def soon_for(self, job: QueuedJob, queue: str) -> Resources:
        """What `queue` (one above `job`) holds for `job` soon: what it holds and what waiting
        jobs claimed, less the leaving work of `job`'s tenant that queues behind `job`."""
        held: Resources = self.usage[queue]
        if self.claimed[queue]:
            held = add(held, self.claimed[queue])
        behind = [
            h.resources for h in self.leaving_of.get(job.tenant, ()) if h.priority < job.priority
        ]
        return subtract(held, add(*behind)) if behind else held

    # -- order ----------------------------------------------------------------------------------

    def share(self, tenant: str, *, with_history: bool) -> float:
        """The tenant's weighted dominant share for the order across tenants: of what it holds
        now; or, `with_history` where there is a history, of its decayed past usage (as an
        amount held on average: what it holds now enters it as time passes) and what it holds
        for good, plus what this round started for it."""
        if with_history and self.history is not None:
            used = add(self.history.get(tenant, {}), self.admitted.get(tenant, {}))
        else:
            used = self.usage[tenant]
        cap = self.tree.capacity
        share = max((used.get(k, 0.0) / cap[k] for k in self.kinds), default=0.0)
        return share / self.path(tenant)[-1].weight

    def inside_guarantee(self, job: QueuedJob) -> bool:
        own = self.path(job.tenant)[-1]
        after = add(self.soon_for(job, job.tenant), job.ask)
        return all(
            after.get(k, 0.0) <= own.guarantee.get(k, 0.0) + EPSILON
            for k, v in job.ask.items()
            if v > EPSILON
        )

    # -- quotas ---------------------------------------------------------------------------------

    def quota_refusal(
        self, job: QueuedJob, less: Resources | None = None, *, now: bool = False
    ) -> str | None:
        """Why the queues refuse `job` whatever is free: a limit, or a queue that does not
        borrow; None when they allow it. Checked at the soon moment, and with `now` also at this
        one (a job that starts now). `less`: work of the job's tenant that would be gone too."""
        for queue in self.path(job.tenant)[1:]:
            if queue.limit is None and queue.borrows:
                continue  # nothing bounds it but the capacity
            views = [(self.soon_for(job, queue.name), self.claimed[queue.name])]
            if now:
                views.insert(0, (dict(self.usage[queue.name]), {}))
            for before, claimed in views:
                after = add(subtract(before, less or {}), job.ask)
                if queue.limit is not None:
                    over = over_bound(after, queue.limit, job.ask, named=True, claimed=claimed)
                    if over is not None:
                        return f"{who(queue)} would pass its limit: {over}"
                if not queue.borrows:
                    over = over_bound(after, queue.guarantee, job.ask, claimed=claimed)
                    if over is not None:
                        return f"{who(queue)} does not borrow and would pass its guarantee: {over}"
        return None

    def within_quotas_soon(self, job: QueuedJob) -> bool:
        """Whether every queue above `job` stays within its limit (and a queue that does not
        borrow within its guarantee) in the soon state for it, in the kinds it asks."""
        for queue in self.path(job.tenant)[1:]:
            if queue.limit is None and queue.borrows:
                continue
            soon = self.soon_for(job, queue.name)
            for kind, amount in job.ask.items():
                if amount <= EPSILON:
                    continue
                held = soon.get(kind, 0.0)
                limit = queue.limit or {}
                if kind in limit and held > limit[kind] + EPSILON:
                    return False
                if not queue.borrows and held > queue.guarantee.get(kind, 0.0) + EPSILON:
                    return False
        return True

    # -- room -----------------------------------------------------------------------------------

    def room_now(self, tenant: str) -> dict[str, float]:
        """What `tenant` may start now: the free capacity, less what waiting jobs claimed
        beyond what leaving work frees, less the idle guarantees of queues that do not lend and
        are not the tenant's own."""
        room = subtract(self.free, self.claimed_of_free()) if self.claimed_any() else self.free
        if self.keep_idle:
            room = subtract(room, self._kept_idle(tenant, soon=False))
        return dict(room)

    def claimed_any(self) -> bool:
        return bool(self.claimed[self.tree.root.name])

    def claimed_of_free(self) -> dict[str, float]:
        """What waiting jobs claimed of the free capacity: their claims beyond what leaving
        work frees."""
        root = self.tree.root.name
        beyond = subtract(self.claimed[root], self.leaving[root])
        return {k: max(0.0, v) for k, v in beyond.items()}

    def room_soon(self, tenant: str) -> dict[str, float]:
        """What `tenant` may claim: the free capacity and what leaving work frees, less what
        waiting jobs claimed, less the idle guarantees it may not use."""
        root = self.tree.root.name
        total = subtract(add(self.free, self.leaving[root]), self.claimed[root])
        return subtract(total, self._kept_idle(tenant, soon=True))

    def _kept_idle(self, tenant: str, *, soon: bool) -> dict[str, float]:
        mine = {q.name for q in self.path(tenant)}
        kept: dict[str, float] = {}
        for queue in self.keep_idle:
            if queue.name in mine:
                continue
            used = self.soon(queue.name) if soon else self.usage[queue.name]
            idle = {k: max(0.0, v - used.get(k, 0.0)) for k, v in queue.guarantee.items()}
            kept = add(kept, idle)
        return kept

    # -- changes --------------------------------------------------------------------------------

    def take(self, job: QueuedJob) -> None:
        """`job` starts: it holds its ask (not preemptible in this round: it has not started)."""
        self._add(self.usage, job.tenant, job.ask)
        mine = self.admitted.setdefault(job.tenant, {})
        for kind, value in job.ask.items():
            mine[kind] = mine.get(kind, 0.0) + value
            self.free[kind] = self.free.get(kind, 0.0) - value
        self.holdings.setdefault(job.tenant, []).append(
            Holding(job.id, job.tenant, job.ask, job.priority, self.now_s, preemptible=False)
        )

    def claim(self, job: QueuedJob, amount: Resources) -> None:
        """`job` waits with `amount` set aside for it."""
        self._add(self.claimed, job.tenant, amount)

    def evict(self, victim: Holding, for_job: str) -> Holding:
        """`victim` is preempted for `for_job`: it leaves; returns it as it now stands."""
        self._add(self.leaving, victim.tenant, victim.resources)
        now = self._swap(victim, replace(victim, stopping_for=for_job))
        self.leaving_of.setdefault(victim.tenant, []).append(now)
        return now

    def spare(self, victim: Holding, was: Holding) -> None:
        """Undo `evict`: `victim` (as `evict` returned it) keeps running as `was`."""
        self._add(self.leaving, victim.tenant, victim.resources, sign=-1.0)
        self.leaving_of[victim.tenant].remove(victim)
        self._swap(victim, was)

    def _swap(self, old: Holding, new: Holding) -> Holding:
        mine = self.holdings[old.tenant]
        mine[mine.index(old)] = new
        return new

    # -- what may be preempted ------------------------------------------------------------------

    def preemptible(self, tenants: Sequence[str]) -> list[Holding]:
        """The holdings of `tenants` that may be preempted now."""
        out = []
        for tenant in tenants:
            path = self.tree.paths.get(tenant)
            if path is None or path[-1].children:
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

    def borrowing(self, tenant: str, taken: Resources) -> bool:
        """Whether `tenant` is above its own guarantee once its leaving work and `taken` are
        gone: borrowed work is taken from a tenant only while it borrows (Kueue's
        reclaimWithinCohort)."""
        path = self.tree.paths.get(tenant)
        if path is None or path[-1].children:  # a tenant without a queue holds only replicas
            return False
        held = subtract(subtract(self.usage[tenant], self.leaving[tenant]), taken)
        guarantee = path[-1].guarantee
        return any(v > guarantee.get(k, 0.0) + EPSILON for k, v in held.items())


def over_bound(
    after: Resources,
    bound: Resources,
    ask: Resources,
    *,
    named: bool = False,
    claimed: Resources | None = None,
) -> str | None:
    """The first kind `ask` takes past `bound` (`after` is the usage with it), in words. With
    `named`, a kind `bound` does not name is not bound (a limit binds only the kinds it names; a
    guarantee that leaves a kind out guarantees none of it). `claimed`: what of `after` is set
    aside for waiting jobs (said so)."""
    for kind, amount in ask.items():
        if amount <= EPSILON or (named and kind not in bound):
            continue
        if after.get(kind, 0.0) > bound.get(kind, 0.0) + EPSILON:
            held = f"{amount_words(after[kind] - amount, kind)} held"
            aside = (claimed or {}).get(kind, 0.0)
            if aside > EPSILON:
                held += f" (of which {number(aside)} set aside for waiting jobs)"
            return f"{held} + {number(amount)} asked > {number(bound.get(kind, 0.0))}"
    return None


def who(queue: QueueNode) -> str:
    return queue.name if queue.level == "tenant" else f"{queue.level} {queue.name}"


def number(value: float) -> str:
    return f"{value:g}"
