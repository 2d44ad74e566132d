"""Each queue's fair share of the capacity, given what each tenant wants now: the allocation the
admission rules' order tends to, shown by `gpuplex queues` and measured against by the replay's
report (Jain's index). Pure.

Guarantees first, from the bottom up: every tenant gets its own guarantee as far as it wants it;
then each team's guarantee that its tenants' own ones leave over goes to its tenants that want
more, and so on up to the organisations. Then the rest of the capacity. Each of those fills is
weighted DRF by progressive filling over all tenants at once (`drf.fill_by_drf`), a queue's
weight split among its children that still grow, so that a team whose tenants are satisfied or
blocked hands its turn to the others and nothing stays idle that a tenant could use. No fill goes
past a queue's limit (in the kinds it names) or a tenant's demand. A queue's share is what its
tenants get.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from gpuplex.core.queues.drf import Resources, add, clamp, fill_by_drf, positive, subtract
from gpuplex.core.queues.tree import QueueNode, QueueTree


def fair_shares(tree: QueueTree, demands: Mapping[str, Resources]) -> dict[str, dict[str, float]]:
    """Per queue (the cluster's included): its fair share given each tenant's demand (a tenant
    absent from `demands` wants nothing)."""
    root, capacity = tree.root, tree.capacity
    members = {q.name: frozenset(t.name for t in q.tenants()) for q in root.walk()}
    wants = {t.name: _within(demands.get(t.name, {}), t.limit) for t in root.tenants()}
    shares = {t.name: clamp(t.guarantee, wants[t.name]) for t in root.tenants()}

    def held(queue: QueueNode) -> dict[str, float]:
        return add(*(shares[name] for name in members[queue.name]))

    def fill(pools: list[tuple[frozenset[str], Resources]]) -> None:
        pools.append((members[root.name], subtract(capacity, held(root))))
        pools += [
            (members[q.name], subtract({**capacity, **q.limit}, held(q)))
            for q in root.walk()
            if q.limit is not None and q.children and q is not root
        ]
        still = {name: positive(subtract(wants[name], shares[name])) for name in wants}
        weights = partial(_split_weight, root, members)
        for name, extra in fill_by_drf(still, pools, weights, capacity).items():
            shares[name] = add(shares[name], extra)

    for level in reversed(_parents_by_depth(root)[1:]):
        fill([(members[q.name], subtract(q.guarantee, held(q))) for q in level])
    fill([])
    return {q.name: held(q) for q in root.walk()}


def _within(amount: Resources, limit: Resources | None) -> dict[str, float]:
    """`amount` capped by `limit` in the kinds the limit names (it binds no others)."""
    if limit is None:
        return dict(amount)
    return {k: min(v, limit[k]) if k in limit else v for k, v in amount.items()}


def _split_weight(
    queue: QueueNode,
    members: Mapping[str, frozenset[str]],
    growing: set[str],
    weight: float = 1.0,
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


def _parents_by_depth(root: QueueNode) -> list[list[QueueNode]]:
    """The queues that have children, by depth: [[root], [its parent children], ...]."""
    levels: list[list[QueueNode]] = []
    level = [root]
    while level:
        levels.append(level)
        level = [c for q in level for c in q.children if c.children]
    return levels
