"""Kueue ResourceFlavors for the fleet, and the queue tree's amounts as Kueue quotas per flavor.

The kinds of the queue tree (`gpuplex.core.queues.tree`) map to Kueue resources on flavors:

The capacity is what the plan leaves free, as the device plugin offers it (`kueue_flavors`), so
that Kueue never admits a Job whose pods find no GPU.

- `gpus` -> `nvidia.com/gpu` on one flavor per GPU model that can run whole, selected by GPU
  feature discovery's `nvidia.com/gpu.product` label (the model's NVML name, spaces as `-`, as GFD
  writes it; a model with several NVML names, SXM and PCIe, is selected by the first one).
- `mig:<profile>` -> `nvidia.com/mig-<profile>` (the device plugin's mixed strategy), the slices
  cut for the queues (`gpuplex.kube.queue_slices`), on one flavor,
  `gpuplex-mig`, without node labels: the resource name alone finds the nodes holding that slice,
  and one flavor keeps every profile in one resource group (Kueue allows 16 per queue).
- `gpu_memory_gib` and `compute_percent` -> `nvidia.com/gpu.shared` replicas on one flavor per
  sharing strategy the plan runs (`mps`, `time-slicing`, GFD's `nvidia.com/gpu.sharing-strategy`).
  The device plugin gives every replica of a GPU the same part of it, so an amount becomes a count
  of replicas: GiB / the smallest replica's memory, percent / the smallest replica's compute share
  (100 / replicas per GPU), rounded down; a quota that sets both gets the smaller count.

Counts become quotas per flavor in `gpuplex.kube.kueue` (a kind that spreads over several flavors,
two GPU models or MPS and time-slicing, fills them in fleet order). Pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from gpuplex.core.plan import Mode, Plan
from gpuplex.core.queues.drf import Resources
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.queue_isolation import Sharing
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX
from gpuplex.kube.device_plugin import MIN_REPLICAS
from gpuplex.kube.naming import (
    GPU_RESOURCE,
    SHARED_GPU_RESOURCE,
    SHARING_STRATEGY_LABEL,
    Manifest,
    metadata,
    mig_resource,
)
from gpuplex.kube.nodes import NodeGpus, node_gpus
from gpuplex.kube.pods import SHARING_STRATEGY
from gpuplex.kube.queue_slices import queue_mig_slices

KUEUE_API = "kueue.x-k8s.io/v1beta2"
#: GPU feature discovery's label for the card's product name (NVML's, spaces written `-`).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_FLAVOR = "gpuplex-mig"
#: CPU and memory: every ClusterQueue covers them (Kueue admits no workload asking for a resource
#: its queue does not list), with the tenant namespace's quota as nominal quota.
NODE_FLAVOR = "gpuplex-node"

#: The way of sharing each GFD sharing strategy is.
STRATEGY_SHARING = {"mps": Sharing.MPS, "time-slicing": Sharing.TIMESLICE}

#: The kind `KueueFlavors.counts` gives shared GPU memory and compute in: device-plugin replicas.
SHARED = "shared"
#: A quota key: (flavor, Kueue resource name).
FlavorResource = tuple[str, str]


@dataclass(frozen=True, slots=True)
class SharedFlavor:
    name: str
    strategy: str  # GFD's sharing-strategy value
    replicas: int  # how many replicas the fleet's shared GPUs of this strategy offer
    replica_gib: float  # memory of the smallest replica
    replica_percent: float  # compute share of the smallest replica


@dataclass(frozen=True, slots=True)
class KueueFlavors:
    """The flavors of one spec and plan, and how the tree's amounts become quotas on them."""

    #: (flavor, GFD product or None, whole GPUs of the model) per model, fleet order
    gpu: tuple[tuple[str, str | None, int], ...]
    #: MIG profile -> slices the fleet can hold
    mig: dict[str, int]
    shared: tuple[SharedFlavor, ...]
    #: Kueue resource -> the most one pod can get: the most any one node has free (one shared
    #: replica: the device plugin refuses a pod more, `failRequestsGreaterThanOne`)
    most_on_a_node: dict[str, int] = field(default_factory=dict)

    def capacity(self) -> dict[FlavorResource, int]:
        out: dict[FlavorResource, int] = {(f, GPU_RESOURCE): n for f, _, n in self.gpu}
        out.update({(MIG_FLAVOR, mig_resource(p)): n for p, n in self.mig.items()})
        out.update({(s.name, SHARED_GPU_RESOURCE): s.replicas for s in self.shared})
        return out

    def counts(self, amounts: Resources) -> dict[str, int]:
        """The tree's resource vector as whole counts per kind (`gpus`, `mig:<p>`, and `shared`
        for replicas); kinds the vector lacks are absent, and so are kinds no flavor holds (a
        shared amount when the plan shares no GPU)."""
        out: dict[str, int] = {}
        if GPUS in amounts and self.gpu:
            out[GPUS] = int(amounts[GPUS])
        for kind, amount in amounts.items():
            if kind.startswith(MIG_PREFIX) and kind[len(MIG_PREFIX) :] in self.mig:
                out[kind] = int(amount)
        replicas = self.shared_replicas(amounts)
        if replicas is not None:
            out[SHARED] = replicas
        return out

    def keys_of(self, kind: str) -> list[FlavorResource]:
        """The flavors and resource that hold a kind of `counts`, in the order they are filled."""
        if kind == GPUS:
            return [(f, GPU_RESOURCE) for f, _, _ in self.gpu]
        if kind == SHARED:
            return [(s.name, SHARED_GPU_RESOURCE) for s in self.shared]
        return [(MIG_FLAVOR, mig_resource(kind[len(MIG_PREFIX) :]))]

    def shared_replicas(self, amounts: Resources) -> int | None:
        """Shared GPU memory and compute as a count of replicas (module docstring); None when the
        vector has neither, or no GPU is shared."""
        if not self.shared:
            return None
        counts = []
        if GPU_MEMORY_GIB in amounts:
            smallest = min(s.replica_gib for s in self.shared)
            counts.append(math.floor(amounts[GPU_MEMORY_GIB] / smallest + 1e-9))
        if COMPUTE_PERCENT in amounts:
            smallest = min(s.replica_percent for s in self.shared)
            counts.append(math.floor(amounts[COMPUTE_PERCENT] / smallest + 1e-9))
        return min(counts) if counts else None

    def engine_capacity(self) -> Resources:
        """The same capacity in the queue engine's kinds (`gpuplex.core.queues.tree`), so that
        gpuplex's own admission rules and Kueue decide on the same amounts: whole GPUs, MIG
        slices, and shared replicas as GPU memory and compute at the smallest replica's size
        (how `shared_replicas` turns an amount into replicas)."""
        out: dict[str, float] = {}
        if self.gpu:
            out[GPUS] = float(sum(n for _, _, n in self.gpu))
        out.update({MIG_PREFIX + p: float(n) for p, n in self.mig.items()})
        if self.shared:
            replicas = sum(s.replicas for s in self.shared)
            out[GPU_MEMORY_GIB] = replicas * min(s.replica_gib for s in self.shared)
            out[COMPUTE_PERCENT] = replicas * min(s.replica_percent for s in self.shared)
        return out

    def offered(self, allowed: frozenset[Sharing]) -> set[FlavorResource]:
        """The flavors and resources a tenant whose isolation allows `allowed` may use."""
        keys: set[FlavorResource] = set()
        if Sharing.WHOLE in allowed:
            keys.update((f, GPU_RESOURCE) for f, _, _ in self.gpu)
        if Sharing.MIG in allowed:
            keys.update((MIG_FLAVOR, mig_resource(p)) for p in self.mig)
        keys.update(
            (s.name, SHARED_GPU_RESOURCE)
            for s in self.shared
            if STRATEGY_SHARING[s.strategy] in allowed
        )
        return keys

    def resource_groups(self) -> list[tuple[list[str], list[str]]]:
        """(covered resources, flavors) per Kueue resource group: whole GPUs, shares, MIG."""
        groups: list[tuple[list[str], list[str]]] = []
        if self.gpu:
            groups.append(([GPU_RESOURCE], [f for f, _, _ in self.gpu]))
        if self.shared:
            groups.append(([SHARED_GPU_RESOURCE], [s.name for s in self.shared]))
        if self.mig:
            groups.append(([mig_resource(p) for p in self.mig], [MIG_FLAVOR]))
        return groups

    def manifests(self) -> list[Manifest]:
        flavors: list[tuple[str, dict[str, str]]] = [
            (f, {GPU_PRODUCT_LABEL: product} if product else {}) for f, product, _ in self.gpu
        ]
        flavors += [(s.name, {SHARING_STRATEGY_LABEL: s.strategy}) for s in self.shared]
        if self.mig:
            flavors.append((MIG_FLAVOR, {}))
        flavors.append((NODE_FLAVOR, {}))
        return [resource_flavor(name, node_labels) for name, node_labels in flavors]

    def notes(self) -> list[str]:
        return [
            f"ResourceFlavor {f} selects no node label: GPU model {f.removeprefix('gpuplex-gpu-')} "
            "has no NVML name in the catalog, so GPU feature discovery's product label is unknown"
            for f, product, _ in self.gpu
            if product is None
        ]


def resource_flavor(name: str, node_labels: dict[str, str]) -> Manifest:
    spec = {"nodeLabels": dict(node_labels)} if node_labels else {}
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": metadata(name),
        "spec": spec,
    }


def kueue_flavors(spec: GpuplexSpec, plan: Plan) -> KueueFlavors:
    """What the plan leaves free for queued jobs, as the device plugin offers it: whole GPUs per
    model that no planned replica holds (not those of nodes the plan shares: the device plugin
    renames all of a shared node's full GPUs), the MIG slices cut for the queues
    (`gpuplex.kube.queue_slices`), and the shared replicas no planned replica holds, per
    strategy. Kueue hands out no more than this, so every pod of an admitted Job finds a GPU."""
    catalog = spec.fleet.catalog
    nodes = node_gpus(spec, plan)
    shared, shared_nodes = shared_flavors(nodes)
    whole: dict[str, int] = {}
    products: dict[str, str | None] = {}
    on_node: dict[tuple[str, str], int] = {}  # (node, resource) -> free
    for item in nodes:
        if item.name in shared_nodes:
            on_node[(item.name, SHARED_GPU_RESOURCE)] = 1
            continue
        for gpu in item.full_gpus():
            model = catalog.model(gpu.model)
            if model is None or gpu.occupants:
                continue
            whole[model.name] = whole.get(model.name, 0) + 1
            products[model.name] = gfd_product(model.nvml_names)
            key = (item.name, GPU_RESOURCE)
            on_node[key] = on_node.get(key, 0) + 1
    mig: dict[str, int] = {}
    for (node, _), counts in queue_mig_slices(spec, plan).items():
        for profile, count in counts.items():
            mig[profile] = mig.get(profile, 0) + count
            key = (node, mig_resource(profile))
            on_node[key] = on_node.get(key, 0) + count
    most: dict[str, int] = {}
    for (_, resource), count in on_node.items():
        most[resource] = max(most.get(resource, 0), count)
    models = tuple((gpu_flavor_name(name), products[name], n) for name, n in whole.items())
    return KueueFlavors(models, mig, shared, most)


def shared_flavors(nodes: list[NodeGpus]) -> tuple[tuple[SharedFlavor, ...], set[str]]:
    """One flavor per sharing strategy the plan runs, sized as the device plugin shares GPUs
    there (`device_plugin.device_plugin_config`: one replica count for all full GPUs of a node),
    less the replicas planned replicas hold; and the names of the nodes that share."""
    found: dict[Mode, list[tuple[int, float, float]]] = {}
    names: set[str] = set()
    for item in nodes:
        full = item.full_gpus()
        modes = [g.mode for g in full if g.mode in SHARING_STRATEGY]
        if not modes:
            continue
        names.add(item.name)
        replicas = max(MIN_REPLICAS, *(len(g.occupants) for g in full))
        for gpu in full:
            size = (replicas - len(gpu.occupants), gpu.memory_mib / 1024 / replicas, 100 / replicas)
            found.setdefault(modes[0], []).append(size)  # one method per node (check_sharing)
    flavors = tuple(
        SharedFlavor(
            name=f"gpuplex-shared-{strategy}",
            strategy=strategy,
            replicas=sum(r for r, _, _ in found[mode]),
            replica_gib=min(g for _, g, _ in found[mode]),
            replica_percent=min(p for _, _, p in found[mode]),
        )
        for mode, strategy in SHARING_STRATEGY.items()
        if mode in found
    )
    return flavors, names


def gfd_product(nvml_names: tuple[str, ...]) -> str | None:
    """GFD's `nvidia.com/gpu.product` value: the NVML name with spaces written `-`."""
    return nvml_names[0].replace(" ", "-") if nvml_names else None


def gpu_flavor_name(model: str) -> str:
    """`gpuplex-gpu-h100-80gb`: lower case, anything outside a DNS name written `-`."""
    return "gpuplex-gpu-" + re.sub(r"[^a-z0-9.-]", "-", model.lower()).strip("-.")


def split(amount: int, capacities: list[int]) -> list[int]:
    """`amount` in whole parts proportional to `capacities` (largest remainder, ties to the
    first), adding up to `amount`; all of it to the first when every capacity is 0."""
    if not capacities:
        return []
    total = sum(capacities)
    if total <= 0:
        return [amount, *([0] * (len(capacities) - 1))]
    exact = [amount * c / total for c in capacities]
    parts = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[: amount - sum(parts)]:
        parts[i] += 1
    return parts
