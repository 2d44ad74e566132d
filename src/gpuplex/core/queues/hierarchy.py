"""Hierarchical quota queues (organisation -> team -> tenant): fair shares and reclaim.

Every queue has a guaranteed quota it may always get back, a limit it never exceeds, and a weight.
Capacity a queue's guarantee does not need right now is idle, and others may borrow it. Fair shares
(`fair_shares`): guarantees first (a tenant's own, then what its team's guarantee leaves over, and
so up), then what is left goes to those that still want more by weighted DRF, a team's weight
split among its tenants, never past a queue's limit or a tenant's demand.

`reclaim` answers "tenant A wants to start a workload inside its guarantee, but the cluster is full:
whom do we preempt?" Only borrowed capacity is taken (no tenant is pushed below its own guarantee),
lowest priority first, then the shortest running, never a workload younger than the minimum
runtime, and the set is pruned to a minimal one. Because only a claim inside the claimant's
guarantee may preempt, and a victim's tenant is by then above its guarantee, the victim can never
preempt back: no loops.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from gpuplex.core.queues.drf import (
    EPSILON,
    Resources,
    add,
    clamp,
    fill_by_drf,
    fits,
    positive,
    subtract,
)


@dataclass(frozen=True, slots=True)
class Queue:
    """A node of the queue tree; a queue without children is a tenant."""

    name: str
    guarantee: Resources = field(default_factory=dict)
    #: None: no limit beyond the parent's
    limit: Resources | None = None
    weight: float = 1.0
    children: tuple[Queue, ...] = ()

    def walk(self) -> Iterator[Queue]:
        """This queue and every queue below it, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def tenants(self) -> Iterator[Queue]:
        return (queue for queue in self.walk() if not queue.children)


@dataclass(frozen=True, slots=True)
class RunningWorkload:
    """A workload holding resources now: whose it is, its priority, and how long it has run."""

    name: str
    tenant: str
    resources: Resources
    priority: int = 0
    running_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """The workloads to preempt (empty when none need to go), or why the claim cannot be met."""

    victims: tuple[RunningWorkload, ...]
    refused: str | None = None

    @property
    def met(self) -> bool:
        return self.refused is None


def check_tree(root: Queue, capacity: Resources) -> None:
    """Refuse a tree whose guarantees could not all be honoured at once.

    Children's guarantees must add up to at most their parent's (the root's to at most the
    capacity), and a guarantee must not exceed its own limit; names must be unique.
    """
    names = [queue.name for queue in root.walk()]
    if len(set(names)) != len(names):
        raise ValueError(f"queue names must be unique, got {names}")
    if not fits(root.guarantee, capacity):
        raise ValueError(f"queue {root.name}: guarantee exceeds the capacity")
    for queue in root.walk():
        if queue.weight <= 0:
            raise ValueError(f"queue {queue.name}: weight must be > 0")
        if queue.limit is not None and not fits(queue.guarantee, queue.limit):
            raise ValueError(f"queue {queue.name}: guarantee exceeds its limit")
        if queue.children and not fits(
            add(*(c.guarantee for c in queue.children)),
            _or_cap(queue.guarantee, capacity, root is queue),
        ):
            raise ValueError(f"queue {queue.name}: children's guarantees exceed its own")


def fair_shares(
    root: Queue, capacity: Resources, demands: Mapping[str, Resources]
) -> dict[str, Resources]:
    """Each queue's fair share of `capacity` given each tenant's demand (absent: wants nothing).

    Guarantees first, from the bottom up: every tenant gets its own guarantee as far as it wants
    it; then each team's guarantee that its tenants' own ones leave over goes to its tenants
    that want more, and so on up to the level below the root. Then the rest of the capacity.
    Each of those fills is weighted DRF over all tenants at once (`fill_by_drf`), a queue's
    weight split among its children that still grow, so a team whose tenants are satisfied or
    blocked hands its turn to the others and nothing stays idle that a tenant could use. No
    fill goes past a queue's limit or a tenant's demand. A queue's share is what its tenants get.
    """
    members = {q.name: frozenset(t.name for t in q.tenants()) for q in root.walk()}
    wants = {t.name: _capped(demands.get(t.name, {}), t.limit) for t in root.tenants()}
    shares = {t.name: clamp(t.guarantee, wants[t.name]) for t in root.tenants()}

    def held(queue: Queue) -> dict[str, float]:
        return add(*(shares[name] for name in members[queue.name]))

    def fill(pools: list[tuple[frozenset[str], Resources]]) -> None:
        pools.append((members[root.name], subtract(capacity, held(root))))
        pools += [
            (members[q.name], subtract(q.limit, held(q)))
            for q in root.walk()
            if q.limit is not None and q.children
        ]
        still = {name: positive(subtract(wants[name], shares[name])) for name in wants}
        weights = partial(_split_weight, root, members)
        extras = fill_by_drf(still, pools, weights, capacity)
        for name, extra in extras.items():
            shares[name] = add(shares[name], extra)

    for level in reversed(_parents_by_depth(root)[1:]):
        fill([(members[q.name], subtract(q.guarantee, held(q))) for q in level])
    fill([])
    return {q.name: held(q) for q in root.walk()}


def _split_weight(
    queue: Queue, members: Mapping[str, frozenset[str]], growing: set[str], weight: float = 1.0
) -> dict[str, float]:
    """`weight` shared down the tree among the children with a growing tenant, by their weights."""
    if not queue.children:
        return {queue.name: weight}
    active = [c for c in queue.children if members[c.name] & growing]
    total = sum(c.weight for c in active)
    shares: dict[str, float] = {}
    for child in active:
        shares.update(_split_weight(child, members, growing, weight * child.weight / total))
    return shares


def _parents_by_depth(root: Queue) -> list[list[Queue]]:
    """The queues that have children, by depth: [[root], [its parent children], ...]."""
    levels: list[list[Queue]] = []
    level = [root]
    while level:
        levels.append(level)
        level = [c for q in level for c in q.children if c.children]
    return levels


def reclaim(
    root: Queue,
    running: Sequence[RunningWorkload],
    capacity: Resources,
    claimant: str,
    request: Resources,
    min_runtime_s: float,
) -> ReclaimPlan:
    """Which borrowed workloads to preempt so `claimant` can start `request` inside its guarantee.

    Refused when the claim would take the claimant past its guarantee (borrowing is never worth a
    preemption) or when the borrowed workloads old enough to preempt cannot free enough.

    Guarantees here are the tenants' own: a team's spare guarantee is shared out by `fair_shares`
    but entitles nobody to preempt. That keeps the no-loop argument one line long: a victim's
    tenant was above its own guarantee in what the victim frees, so asking for it back is refused.
    """
    tenants = {tenant.name: tenant for tenant in root.tenants()}
    if claimant not in tenants:
        raise ValueError(f"unknown tenant {claimant!r}")
    usage = usage_by_tenant(running)
    free = subtract(capacity, add(*usage.values()))
    if fits(request, free):
        return ReclaimPlan(())
    claimant_after = add(usage.get(claimant, {}), request)
    if not fits(claimant_after, tenants[claimant].guarantee):
        return ReclaimPlan((), f"{claimant} would exceed its guarantee; only guarantees reclaim")
    candidates = sorted(
        (
            w
            for w in running
            if w.tenant != claimant and w.tenant in tenants and w.running_s >= min_runtime_s
        ),
        key=lambda w: (w.priority, w.running_s),
    )
    victims: list[RunningWorkload] = []
    for workload in candidates:
        if fits(request, add(free, *(v.resources for v in victims))):
            break
        need = subtract(request, add(free, *(v.resources for v in victims)))
        frees_needed = any(
            need.get(r, 0.0) > EPSILON and amount > 0 for r, amount in workload.resources.items()
        )
        if frees_needed and _keeps_guarantees([*victims, workload], usage, tenants):
            victims.append(workload)
    if not fits(request, add(free, *(v.resources for v in victims))):
        return ReclaimPlan((), "not enough borrowed capacity is old enough to preempt")
    for workload in reversed(list(victims)):
        others = [v for v in victims if v is not workload]
        if fits(request, add(free, *(v.resources for v in others))):
            victims = others
    return ReclaimPlan(tuple(victims))


def usage_by_tenant(running: Sequence[RunningWorkload]) -> dict[str, Resources]:
    usage: dict[str, Resources] = {}
    for workload in running:
        usage[workload.tenant] = add(usage.get(workload.tenant, {}), workload.resources)
    return usage


def _keeps_guarantees(
    victims: Sequence[RunningWorkload],
    usage: Mapping[str, Resources],
    tenants: Mapping[str, Queue],
) -> bool:
    """Whether every victim's tenant keeps what it holds of its guarantee after the preemption."""
    for tenant in {v.tenant for v in victims}:
        taken = add(*(v.resources for v in victims if v.tenant == tenant))
        held = usage[tenant]
        kept = clamp(tenants[tenant].guarantee, held)
        if not fits(kept, subtract(held, taken)):
            return False
    return True


def _capped(amount: Resources, limit: Resources | None) -> Resources:
    return amount if limit is None else clamp(amount, limit)


def _or_cap(guarantee: Resources, capacity: Resources, is_root: bool) -> Resources:
    """The bound on a queue's children's guarantees: its own, or the capacity at an unset root."""
    return capacity if is_root and not guarantee else guarantee
