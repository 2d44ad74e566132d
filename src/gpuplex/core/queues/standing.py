"""Where each queue of the tree stands now, kind by kind: its guarantee, its limit, what is in use
and what of that is borrowed (used above the guarantee). Pure.

What is in use is what holds capacity now (the spec's long-running replicas and the jobs that are
starting, running or stopping), each holding counted in its tenant's queue and in every queue
above it, as the admission rules count it (`gpuplex.core.queues.admission`). A holding of a tenant
without a queue counts only in the cluster's. The cluster's guarantee and limit are the fleet's
capacity; it lists the kinds in use and those some queue guarantees or limits, not every MIG
profile the fleet could be cut into.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuplex.core.queues.admission import Holding
from gpuplex.core.queues.drf import EPSILON, Resources
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS


@dataclass(frozen=True, slots=True)
class KindStanding:
    """One kind of capacity in one queue. `limit` None: the queue sets none for this kind."""

    kind: str
    guarantee: float
    limit: float | None
    in_use: float

    @property
    def borrowed(self) -> float:
        """What is in use above the guarantee (0 when within it)."""
        return max(0.0, self.in_use - self.guarantee)


@dataclass(frozen=True, slots=True)
class QueueStanding:
    """One queue: where it sits in the tree, its settings and each kind it guarantees, limits or
    uses."""

    name: str
    level: str  # cluster, organisation, team or tenant
    parent: str | None
    depth: int  # 0 for the cluster
    weight: float
    lends: bool
    borrows: bool
    kinds: tuple[KindStanding, ...]


def queue_usage(tree: QueueTree, holdings: Iterable[Holding]) -> dict[str, dict[str, float]]:
    """Per queue: what its tenants' holdings add up to, per kind."""
    usage: dict[str, dict[str, float]] = {q.name: {} for q in tree.root.walk()}
    for holding in holdings:
        path = tree.paths.get(holding.tenant)
        if path is None or path[-1].children:  # no queue of its own: the cluster's only
            path = (tree.root,)
        for queue in path:
            used = usage[queue.name]
            for kind, amount in holding.resources.items():
                used[kind] = used.get(kind, 0.0) + amount
    return usage


def standings(tree: QueueTree, holdings: Sequence[Holding]) -> list[QueueStanding]:
    """Every queue, parents before children, with where it stands now."""
    usage = queue_usage(tree, holdings)
    named_below = {
        kind
        for queue in tree.root.walk()
        if queue is not tree.root
        for kind in _named(queue.guarantee, queue.limit or {})
    }
    out = []
    for queue in tree.root.walk():
        path = tree.paths[queue.name]
        out.append(
            QueueStanding(
                name=queue.name,
                level=queue.level,
                parent=path[-2].name if len(path) > 1 else None,
                depth=len(path) - 1,
                weight=queue.weight,
                lends=queue.lends,
                borrows=queue.borrows,
                kinds=_kinds(queue, usage[queue.name], named_below if queue is tree.root else None),
            )
        )
    return out


def _named(*amounts: Resources) -> set[str]:
    """The kinds of more than nothing in any of `amounts`."""
    return {kind for amount in amounts for kind, value in amount.items() if value > EPSILON}


def _kinds(queue: QueueNode, used: Resources, only: set[str] | None) -> tuple[KindStanding, ...]:
    """The kinds the queue guarantees, limits or uses (amounts of nothing left out; with `only`,
    those it uses or that are in `only`), in a fixed order: whole GPUs, GPU memory, compute, then
    MIG profiles by name."""
    limit = queue.limit or {}
    if only is None:
        named = _named(queue.guarantee, limit, used)
    else:
        named = _named(used) | (only & _named(queue.guarantee))
    return tuple(
        KindStanding(
            kind=kind,
            guarantee=queue.guarantee.get(kind, 0.0),
            limit=limit.get(kind),  # a limit binds only the kinds it names
            in_use=used.get(kind, 0.0),
        )
        for kind in sorted(named, key=kind_order)
    )


def kind_order(kind: str) -> tuple[int, str]:
    """Whole GPUs, GPU memory, compute, then MIG profiles (and anything else) by name."""
    first = (GPUS, GPU_MEMORY_GIB, COMPUTE_PERCENT)
    return (first.index(kind), "") if kind in first else (len(first), kind)
