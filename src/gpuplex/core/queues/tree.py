"""The queue tree of a spec's `queues:` as the admission rules use it. Pure.

Amounts become resource vectors with one name per kind of GPU capacity, as a tenant's `quota`
counts them: `gpus` (whole GPUs), `gpu_memory_gib` and `compute_percent` (shares of a GPU),
`mig:<profile>` (MIG slices). Each kind is its own quota, as Kueue counts one resource per
resource name; whether a job also fits on a GPU is the planner's question, not the queue's.

The cluster's capacity of each kind comes from the fleet: GPUs that can run without MIG count as
whole GPUs, their memory and 100 % compute each as shared capacity; GPUs that can run MIG count the
most slices of each profile they could hold. A GPU with `mig: auto` can do either, so it counts in
both (the planner decides, job by job, which it becomes).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from gpuplex.core.queues.drf import Resources, add
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import runs_mig, runs_whole
from gpuplex.core.spec.queues import (
    DEFAULT_HALF_LIFE_S,
    PreemptionSpec,
    QueueSpec,
    QueuesSpec,
    WithinQueue,
)
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX
from gpuplex.core.spec.tenants import QuotaSpec

DEFAULT_MIN_RUNTIME_S = 300.0
DEFAULT_GRACE_S = 30.0


@dataclass(frozen=True, slots=True)
class PreemptionRules:
    """A queue's preemption rules, inherited values filled in."""

    reclaim: bool = True
    within_queue: WithinQueue = WithinQueue.LOWER_PRIORITY
    min_runtime_s: float = DEFAULT_MIN_RUNTIME_S
    grace_s: float = DEFAULT_GRACE_S


@dataclass(frozen=True, slots=True)
class QueueNode:
    """One queue of the tree; a node without children is a tenant's queue."""

    name: str
    level: str  # "cluster", "organisation", "team" or "tenant"
    guarantee: Resources = field(default_factory=dict)
    limit: Resources | None = None
    weight: float = 1.0
    lends: bool = True
    borrows: bool = True
    preemption: PreemptionRules = field(default_factory=PreemptionRules)
    children: tuple[QueueNode, ...] = ()

    def walk(self) -> Iterator[QueueNode]:
        """This queue and every queue below it, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def tenants(self) -> Iterator[QueueNode]:
        return (queue for queue in self.walk() if not queue.children)


@dataclass(frozen=True, slots=True)
class QueueTree:
    """The root (the whole cluster, guarantee = capacity), per queue its ancestors, and how long
    fair sharing remembers past usage (`gpuplex.core.queues.usage`)."""

    root: QueueNode
    capacity: Resources
    #: per queue name: the queues from the root down to it (itself last)
    paths: Mapping[str, tuple[QueueNode, ...]]
    half_life_s: float = float(DEFAULT_HALF_LIFE_S)

    @classmethod
    def of(
        cls, root: QueueNode, capacity: Resources, half_life_s: float = DEFAULT_HALF_LIFE_S
    ) -> QueueTree:
        paths: dict[str, tuple[QueueNode, ...]] = {}

        def note(queue: QueueNode, above: tuple[QueueNode, ...]) -> None:
            paths[queue.name] = (*above, queue)
            for child in queue.children:
                note(child, paths[queue.name])

        note(root, ())
        return cls(root, dict(capacity), paths, float(half_life_s))

    def tenant(self, name: str) -> QueueNode | None:
        path = self.paths.get(name)
        return path[-1] if path and not path[-1].children else None

    def tenant_names(self) -> list[str]:
        return [q.name for q in self.root.tenants()]


def amounts(quota: QuotaSpec) -> dict[str, float]:
    """A quota as a resource vector (kinds it does not set are absent)."""
    out: dict[str, float] = {}
    if quota.gpus is not None:
        out[GPUS] = float(quota.gpus)
    if quota.gpu_memory_gib is not None:
        out[GPU_MEMORY_GIB] = float(quota.gpu_memory_gib)
    if quota.compute_percent is not None:
        out[COMPUTE_PERCENT] = float(quota.compute_percent)
    for profile, count in quota.mig.items():
        out[MIG_PREFIX + profile] = float(count)
    return out


def fleet_capacity(spec: GpuplexSpec) -> dict[str, float]:
    """What the fleet holds of each kind (see the module docstring)."""
    catalog = spec.fleet.catalog
    out: dict[str, float] = {}
    for node in spec.fleet.nodes:
        for group in node.gpus:
            model = catalog.model(group.model)
            if model is None:
                continue
            if runs_whole(model, group.mig):
                out = add(
                    out,
                    {
                        GPUS: group.count,
                        GPU_MEMORY_GIB: group.count * model.memory_gib,
                        COMPUTE_PERCENT: group.count * 100.0,
                    },
                )
            if runs_mig(model, group.mig) and model.mig is not None:
                slices = {
                    MIG_PREFIX + p.name: float(group.count * p.max_count)
                    for p in model.mig.profiles
                }
                out = add(out, slices)
    return out


def queue_tree(spec: GpuplexSpec, capacity: Resources | None = None) -> QueueTree | None:
    """The tree of `spec.queues` under a root holding `capacity` (default: the fleet's); None
    when the spec has no queues."""
    if not spec.queues.enabled:
        return None
    return tree_of(spec.queues, capacity if capacity is not None else fleet_capacity(spec))


def tree_of(queues: QueuesSpec, capacity: Resources) -> QueueTree:
    """The tree of a `queues:` section under a root holding `capacity`."""
    capacity = dict(capacity)
    top = _preemption(queues.preemption, PreemptionRules())
    organisations = []
    for org in queues.organisations:
        org_rules = _preemption(org.preemption, top)
        teams = []
        for team in org.teams:
            team_rules = _preemption(team.preemption, org_rules)
            tenants = tuple(
                _node(t, "tenant", _preemption(t.preemption, team_rules), ()) for t in team.tenants
            )
            teams.append(_node(team, "team", team_rules, tenants))
        organisations.append(_node(org, "organisation", org_rules, tuple(teams)))
    root = QueueNode(
        name="cluster",
        level="cluster",
        guarantee=capacity,
        limit=capacity,
        preemption=top,
        children=tuple(organisations),
    )
    return QueueTree.of(root, capacity, queues.fair_sharing.half_life_s)


def _node(
    spec: QueueSpec, level: str, rules: PreemptionRules, children: tuple[QueueNode, ...]
) -> QueueNode:
    return QueueNode(
        name=spec.name,
        level=level,
        guarantee=amounts(spec.guarantee),
        limit=None if spec.limit is None else amounts(spec.limit),
        weight=float(spec.weight),
        lends=spec.lend,
        borrows=spec.borrow,
        preemption=rules,
        children=children,
    )


def _preemption(spec: PreemptionSpec, parent: PreemptionRules) -> PreemptionRules:
    return PreemptionRules(
        reclaim=parent.reclaim if spec.reclaim is None else spec.reclaim,
        within_queue=parent.within_queue if spec.within_queue is None else spec.within_queue,
        min_runtime_s=(
            parent.min_runtime_s if spec.min_runtime_s is None else float(spec.min_runtime_s)
        ),
        grace_s=parent.grace_s if spec.grace_s is None else float(spec.grace_s),
    )
