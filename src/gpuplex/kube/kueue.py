"""The spec's `queues:` as Kueue objects (kueue.x-k8s.io/v1beta2, the version Kueue stores), so
that jobs on Kubernetes wait, borrow and are preempted by the same rules as on one server
(`gpuplex.core.queues.admission`). Pure.

The tree (`gpuplex.core.queues.tree.queue_tree`) becomes hierarchical cohorts:

- a root Cohort `gpuplex` for the whole cluster, so that organisations borrow from each other;
- a Cohort per organisation (parent: the root) and per team (parent: its organisation),
  `gpuplex-<name>`;
- a ClusterQueue `gpuplex-<tenant>` per tenant, in its team's Cohort, admitting only from the
  tenant's namespace, and a LocalQueue `jobs` in that namespace pointing at it.

Quotas per flavor and resource (`kueue_flavors`): a queue's guarantee is the nominal quota of its
subtree, carved out of its parent's per flavor (a kind on several flavors fills them in fleet
order), the root holding the fleet's capacity. Kueue adds a Cohort's own nominal quota to its
children's, so a Cohort gets only the part its children do not hold. A kind a queue leaves unset
is its children's together. borrowingLimit = limit - guarantee (0 when the queue does not borrow;
absent when it has no limit for the kind), spread over the kind's flavors in proportion to what
each has beyond the queue's own, so the queue never goes above its limit; lendingLimit = 0 when
the queue does not lend. Fair sharing weight = the queue's
weight. A ClusterQueue's preemption: reclaimWithinCohort Any when reclaim is on (Never
otherwise), withinClusterQueue LowerPriority or Never, borrowWithinCohort Never (borrowed work is
never preempted for more borrowing); StrictFIFO, as gpuplex keeps each tenant's queue in order.
Kueue has no minimum runtime; the grace period is the pods' own terminationGracePeriodSeconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplex.core.plan import Plan
from gpuplex.core.plural import counted
from gpuplex.core.queues.tree import QueueNode, QueueTree, queue_tree
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.queue_isolation import allowed_sharing, kind_allowed, sharing_words
from gpuplex.core.spec.queues import WithinQueue
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, amount_words
from gpuplex.kube.kueue_flavors import (
    KUEUE_API,
    NODE_FLAVOR,
    SHARED,
    FlavorResource,
    KueueFlavors,
    kueue_flavors,
    split,
)
from gpuplex.kube.naming import Manifest, metadata, namespace_for
from gpuplex.kube.tenants import namespace_quota

ROOT_COHORT = "gpuplex"
#: The LocalQueue in every tenant namespace: jobs carry `kueue.x-k8s.io/queue-name: jobs`.
LOCAL_QUEUE = "jobs"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

#: The priorities of jobs inside one queue, on the admission engine's scale (0 is a job's default).
#: A job picks one with the `kueue.x-k8s.io/priority-class` label; a job without it takes its
#: pods' PriorityClass (the tenant's), which ranks above all three.
JOB_PRIORITIES = {"gpuplex-low": -100, "gpuplex-normal": 0, "gpuplex-high": 100}


def queue_name(queue: str) -> str:
    """The Cohort or ClusterQueue of a queue of the tree (names are unique across it)."""
    return f"gpuplex-{queue}"


@dataclass(frozen=True, slots=True)
class QueueQuotas:
    """The queue tree carved into Kueue quotas: per queue its subtree's quota per flavor, which
    flavors each tenant's queue offers, and what the carving left out."""

    tree: QueueTree
    flavors: KueueFlavors
    subtree: dict[str, dict[FlavorResource, int]]
    offered: dict[str, set[FlavorResource]]
    notes: list[str]

    def most(self, tenant: str) -> dict[str, int]:
        """Kueue resource -> the most the tenant's queue may hold at once: its nominal quota
        plus what it may borrow, per flavor it offers, never above the flavor's capacity."""
        node = self.tree.tenant(tenant)
        assert node is not None
        held = self.subtree[tenant]
        borrowing = _borrowing(node, self.flavors, held, self.offered[tenant])
        capacity = self.flavors.capacity()
        out: dict[str, int] = {}
        for key in sorted(self.offered[tenant]):
            nominal = held.get(key, 0)
            # no borrowingLimit (no limit for the kind): Kueue lets it borrow all there is
            most = nominal + borrowing.get(key, capacity[key]) if node.borrows else nominal
            out[key[1]] = out.get(key[1], 0) + min(most, capacity[key])
        return out


def queue_quotas(spec: GpuplexSpec, plan: Plan) -> QueueQuotas | None:
    """None when the spec has no queues or does not target Kueue (`kubernetes.kueue`)."""
    if spec.kubernetes.kueue is None:
        return None
    flavors = kueue_flavors(spec, plan)
    tree = queue_tree(spec, flavors.engine_capacity())
    if tree is None:
        return None
    tenants = {t.name: t for t in spec.tenants}
    offered = {
        leaf.name: flavors.offered(allowed_sharing(tenants[leaf.name]))
        for leaf in tree.root.tenants()
    }
    subtree, short = _allot(tree.root, flavors.capacity(), flavors, offered)
    notes = [*flavors.notes(), *short, *_isolation_notes(spec, tree, flavors)]
    return QueueQuotas(tree, flavors, subtree, offered, notes + _shared_notes(tree.root, flavors))


def kueue_manifests(spec: GpuplexSpec, plan: Plan) -> tuple[list[Manifest], list[str]]:
    """Flavors, priority classes, Cohorts, ClusterQueues, LocalQueues; and notes. Nothing when
    the spec has no queues or does not target Kueue."""
    quotas = queue_quotas(spec, plan)
    if quotas is None:
        if spec.queues.enabled:
            return [], [NO_KUEUE_NOTE]
        return [], []
    tree, flavors, subtree = quotas.tree, quotas.flavors, quotas.subtree
    parents = {name: path[-2].name for name, path in tree.paths.items() if len(path) > 1}

    def cohort_of(queue: str) -> str:
        parent = parents[queue]
        return ROOT_COHORT if parent == tree.root.name else queue_name(parent)

    manifests = [*flavors.manifests(), *priority_classes()]
    for node in tree.root.walk():
        if node.children:
            parent = cohort_of(node.name) if node is not tree.root else None
            manifests.append(_cohort(node, flavors, subtree, parent))
    for tenant in tree.root.tenants():
        manifests.append(
            _cluster_queue(
                spec, tenant, flavors, subtree, quotas.offered[tenant.name], cohort_of(tenant.name)
            )
        )
    for tenant in tree.root.tenants():
        manifests.append(local_queue(namespace_for(spec, tenant.name), tenant.name))
    return manifests, quotas.notes


NO_KUEUE_NOTE = (
    "queues: are not rendered as Kueue objects: set kubernetes.kueue (`kueue: {}`) where the "
    "cluster runs Kueue; without it tenants' Jobs run unqueued, within their namespace quotas"
)


def _isolation_notes(spec: GpuplexSpec, tree: QueueTree, flavors: KueueFlavors) -> list[str]:
    """A queue guarantee or limit of a kind its tenant's isolation does not allow: Kueue's
    quotas leave it out."""
    tenants = {t.name: t for t in spec.tenants}
    notes = []
    for leaf in tree.root.tenants():
        tenant = tenants[leaf.name]
        allowed = allowed_sharing(tenant)
        kinds = {*leaf.guarantee, *(leaf.limit or {})}
        refused = sorted(k for k in kinds if not kind_allowed(k, allowed))
        if refused:
            notes.append(
                f"queue {leaf.name}: Kueue's quotas leave out its {', '.join(refused)}: "
                f"{sharing_words(tenant)}"
            )
    return notes


def priority_classes() -> list[Manifest]:
    return [
        {
            "apiVersion": KUEUE_API,
            "kind": "WorkloadPriorityClass",
            "metadata": metadata(name),
            "value": value,
            "description": f"gpuplex job priority {value} inside its tenant's queue",
        }
        for name, value in JOB_PRIORITIES.items()
    ]


def local_queue(namespace: str, tenant: str) -> Manifest:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": metadata(LOCAL_QUEUE, namespace=namespace, tenant=tenant),
        "spec": {"clusterQueue": queue_name(tenant)},
    }


def _wanted(
    node: QueueNode, flavors: KueueFlavors, offered: dict[str, set[FlavorResource]]
) -> dict[str, int]:
    """Per kind, what the queue's subtree holds: its guarantee, its children's where it sets none
    (or where theirs are more); a tenant's queue only the kinds its flavors offer."""
    own = flavors.counts(node.guarantee)
    if not node.children:
        own = {k: v for k, v in own.items() if set(flavors.keys_of(k)) & offered[node.name]}
    below = [_wanted(child, flavors, offered) for child in node.children]
    kinds = set(own).union(*below)
    return {kind: max(own.get(kind, 0), sum(b.get(kind, 0) for b in below)) for kind in kinds}


def _allot(
    root: QueueNode,
    capacity: dict[FlavorResource, int],
    flavors: KueueFlavors,
    offered: dict[str, set[FlavorResource]],
) -> tuple[dict[str, dict[FlavorResource, int]], list[str]]:
    """Per queue, its subtree's quota per flavor: the root holds the capacity, every other
    queue takes what it wants from what its parent holds and its elder siblings left. What is
    not there (whole GPUs of nodes the plan shares, a rounding of shares) is left out, noted."""
    out: dict[str, dict[FlavorResource, int]] = {root.name: dict(capacity)}
    notes: list[str] = []

    def carve(node: QueueNode) -> None:
        left = dict(out[node.name])
        for child in node.children:
            mine: dict[FlavorResource, int] = {}
            for kind, amount in _wanted(child, flavors, offered).items():
                for key in _keys(child, kind, flavors, offered):
                    mine[key] = min(amount, left.get(key, 0))
                    amount -= mine[key]
                    left[key] = left.get(key, 0) - mine[key]
                if amount > 0:
                    what = (
                        counted(amount, "shared-GPU replica")
                        if kind == SHARED
                        else amount_words(amount, kind)
                    )
                    notes.append(
                        f"queue {child.name}: Kueue's quotas leave out {what} of its guarantee: "
                        "the plan does not leave that many free (planned replicas hold the rest, "
                        "or the device plugin shares the full GPUs of a node the plan shares)"
                    )
            out[child.name] = mine
            carve(child)

    carve(root)
    return out, notes


def _keys(
    node: QueueNode, kind: str, flavors: KueueFlavors, offered: dict[str, set[FlavorResource]]
) -> list[FlavorResource]:
    """The flavors that hold a kind for this queue, in fill order: a tenant's, only those it is
    offered."""
    keys = flavors.keys_of(kind)
    return keys if node.children else [k for k in keys if k in offered[node.name]]


def _cohort(
    node: QueueNode,
    flavors: KueueFlavors,
    subtree: dict[str, dict[FlavorResource, int]],
    parent: str | None,
) -> Manifest:
    """A Cohort: its own nominal quota is the part of its subtree's its children do not hold."""
    held = subtree[node.name]
    nominal = {
        key: max(0, held.get(key, 0) - sum(subtree[c.name].get(key, 0) for c in node.children))
        for key in flavors.capacity()
    }
    spec: dict[str, Any] = {}
    if parent is not None:
        spec["parentName"] = parent
    groups = _resource_groups(node, flavors, nominal, held, root=parent is None)
    if groups:
        spec["resourceGroups"] = groups
    spec["fairSharing"] = {"weight": _weight(node.weight)}
    name = queue_name(node.name) if parent is not None else ROOT_COHORT
    return {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": metadata(name), "spec": spec}


def _cluster_queue(
    spec: GpuplexSpec,
    tenant: QueueNode,
    flavors: KueueFlavors,
    subtree: dict[str, dict[FlavorResource, int]],
    offered: set[FlavorResource],
    cohort: str,
) -> Manifest:
    """Only the flavors the tenant's isolation allows (`offered`): Kueue admits no workload asking
    for a resource its queue does not list, whatever the queue could borrow."""
    nominal = {key: subtree[tenant.name].get(key, 0) for key in offered}
    groups = _resource_groups(tenant, flavors, nominal, nominal, root=False, offered=offered)
    quota = namespace_quota(spec, next(t for t in spec.tenants if t.name == tenant.name))
    node_resources = [
        {"name": "cpu", "nominalQuota": str(quota.cpu_cores), "borrowingLimit": "0"},
        {"name": "memory", "nominalQuota": f"{quota.memory_gib}Gi", "borrowingLimit": "0"},
    ]
    groups.append(
        {
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": NODE_FLAVOR, "resources": node_resources}],
        }
    )
    rules = tenant.preemption
    within = "LowerPriority" if rules.within_queue is WithinQueue.LOWER_PRIORITY else "Never"
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": metadata(queue_name(tenant.name), tenant=tenant.name),
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {
                "matchLabels": {NAMESPACE_NAME_LABEL: namespace_for(spec, tenant.name)}
            },
            "queueingStrategy": "StrictFIFO",
            "resourceGroups": groups,
            "preemption": {
                "reclaimWithinCohort": "Any" if rules.reclaim else "Never",
                "withinClusterQueue": within,
                "borrowWithinCohort": {"policy": "Never"},
            },
            "fairSharing": {"weight": _weight(tenant.weight)},
        },
    }


def _resource_groups(
    node: QueueNode,
    flavors: KueueFlavors,
    nominal: dict[FlavorResource, int],
    held: dict[FlavorResource, int],
    *,
    root: bool,
    offered: set[FlavorResource] | None = None,
) -> list[dict[str, Any]]:
    """Every flavor and resource of the fleet (a ClusterQueue: those `offered`), nominal quota 0
    where the queue has none (Kueue admits no workload asking for a resource its queue does not
    list). Quantities as Kueue stores them (strings), so a second apply changes nothing."""
    every = set(flavors.capacity()) if offered is None else offered
    extra = _borrowing(node, flavors, held, every) if not root else {}
    groups = []
    for covered, names in flavors.resource_groups():
        entries = []
        for flavor in names:
            if not all((flavor, resource) in every for resource in covered):
                continue
            resources = []
            for resource in covered:
                key = (flavor, resource)
                entry: dict[str, Any] = {
                    "name": resource,
                    "nominalQuota": str(nominal.get(key, 0)),
                }
                if not root and not node.borrows:
                    entry["borrowingLimit"] = "0"
                elif key in extra:
                    entry["borrowingLimit"] = str(extra[key])
                if not root and not node.lends:
                    entry["lendingLimit"] = "0"
                resources.append(entry)
            entries.append({"name": flavor, "resources": resources})
        if entries:
            groups.append({"coveredResources": covered, "flavors": entries})
    return groups


def _borrowing(
    node: QueueNode,
    flavors: KueueFlavors,
    held: dict[FlavorResource, int],
    offered: set[FlavorResource],
) -> dict[FlavorResource, int]:
    """Per flavor, how much the queue may borrow: its limit beyond what its subtree holds, per
    kind, spread over the kind's `offered` flavors in proportion to each one's capacity beyond
    the queue's own; nothing for a kind the limit leaves unset."""
    if node.limit is None:
        return {}
    capacity = flavors.capacity()
    out: dict[FlavorResource, int] = {}
    for kind, limit in flavors.counts(node.limit).items():
        keys = [key for key in flavors.keys_of(kind) if key in offered]
        if not keys:
            continue
        beyond = max(0, limit - sum(held.get(key, 0) for key in keys))
        room = [max(0, capacity.get(key, 0) - held.get(key, 0)) for key in keys]
        out.update(zip(keys, split(beyond, room), strict=True))
    return out


def _weight(weight: float) -> str:
    """A Kubernetes quantity, as Kueue stores it: `2`, `0.5`."""
    return str(int(weight)) if float(weight).is_integer() else str(weight)


def _shared_notes(root: QueueNode, flavors: KueueFlavors) -> list[str]:
    """Shared GPU memory or compute in a queue, when the plan shares no GPU: Kueue has no
    replicas to count them in."""
    if flavors.shared:
        return []
    return [
        f"queue {queue.name}: its shared GPU memory and compute are not in Kueue's quotas: the "
        "plan shares no GPU (MPS or time-slicing), so the device plugin offers no "
        "nvidia.com/gpu.shared replicas"
        for queue in root.walk()
        if queue is not root
        and any(
            kind in amounts
            for amounts in (queue.guarantee, queue.limit or {})
            for kind in (GPU_MEMORY_GIB, COMPUTE_PERCENT)
        )
    ]
