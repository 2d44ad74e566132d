"""Fleet nodes as Kubernetes sees them: which of a node's GPUs the plan runs which way, and the Node
object gpuplex server-side-applies to steer pods and the GPU operator (labels and a pool taint).

The Node object is partial: only the fields gpuplex owns. Nodes are never created or pruned by
gpuplex; the kubelet registers them, gpuplex labels them.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.catalog import Catalog
from gpuplex.core.plan import GpuView, Mode, Plan
from gpuplex.core.spec import GpuplexSpec, MigModeSpec, NodeSpec
from gpuplex.core.spec.pools import fleet_pools, gpu_pool
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    POOL_LABEL_PREFIX,
    POOL_TAINT_KEY,
    Manifest,
    metadata,
)


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """One fleet node and the plan's view of each of its GPUs (index order)."""

    node: NodeSpec
    gpus: tuple[GpuView, ...]
    #: GPUs of a `mig: "on"` group on a MIG-capable model: held in MIG mode even when the plan
    #: puts no slice on them (as on a single host), so they are never offered as whole GPUs.
    pinned_mig: frozenset[int]

    @property
    def name(self) -> str:
        return self.node.name

    def mig_gpus(self) -> list[GpuView]:
        """GPUs in MIG mode: planned slices, or pinned by `mig: "on"`."""
        return [g for g in self.gpus if g.mode is Mode.MIG or g.index in self.pinned_mig]

    def full_gpus(self) -> list[GpuView]:
        """GPUs the device plugin offers whole (or shares whole): every GPU not in MIG mode."""
        return [g for g in self.gpus if not (g.mode is Mode.MIG or g.index in self.pinned_mig)]


def node_gpus(spec: GpuplexSpec, plan: Plan) -> list[NodeGpus]:
    """Every fleet node in spec order with the plan's GPUs on it. A plan that names a node the
    fleet does not have was made from another spec: refuse it rather than label the wrong nodes."""
    names = {node.name for node in spec.fleet.nodes}
    strangers = sorted({g.node for g in plan.gpus} - names)
    if strangers:
        raise KubeRenderError(
            f"the plan has GPUs on node(s) {', '.join(strangers)}, which the spec's fleet does not "
            "list: make the plan again from this spec (gpuplex plan)"
        )
    out = []
    for node in spec.fleet.nodes:
        views = sorted((g for g in plan.gpus if g.node == node.name), key=lambda g: g.index)
        out.append(NodeGpus(node, tuple(views), _pinned_mig(node, spec.fleet.catalog)))
    return out


def _pinned_mig(node: NodeSpec, catalog: Catalog) -> frozenset[int]:
    """Indices of `mig: "on"` GPUs, numbered as the planner numbers them (groups in order, groups
    of unknown models skipped: validation reports those)."""
    pinned: set[int] = set()
    index = 0
    for group in node.gpus:
        model = catalog.model(group.model)
        if model is None:
            continue
        for _ in range(group.count):
            if group.mig is MigModeSpec.ON and model.mig is not None:
                pinned.add(index)
            index += 1
    return frozenset(pinned)


def node_pools(spec: GpuplexSpec, node: NodeSpec) -> list[str]:
    """Pools whose pods may run on the node: the pools of its GPUs, and every pool of the fleet
    where one of its GPUs is in none (the planner lets a pool-less GPU take any pool's work)."""
    pools: set[str] = set()
    for group in node.gpus:
        pool = gpu_pool(node, group)
        if pool is None:
            pools |= fleet_pools(spec.fleet)
        else:
            pools.add(pool)
    return sorted(pools)


def node_manifest(
    spec: GpuplexSpec, node: NodeSpec, *, device_plugin_config: str, mig_config: str
) -> Manifest:
    """The Node fields gpuplex owns: which device-plugin config and MIG layout the GPU operator
    gives it, which pools' pods it takes, and a taint that keeps other pods off a pooled node."""
    extra = {
        DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config,
        MIG_CONFIG_LABEL: mig_config,
        **{POOL_LABEL_PREFIX + pool: "true" for pool in node_pools(spec, node)},
    }
    manifest: Manifest = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata(node.name, extra_labels=extra),
    }
    if node.pool is not None:
        manifest["spec"] = {
            "taints": [{"key": POOL_TAINT_KEY, "value": node.pool, "effect": "NoSchedule"}]
        }
    return manifest


def pool_override_notes(nodes: list[NodeGpus]) -> list[str]:
    """Kubernetes pools whole nodes: a GPU lent to another pool than its node's makes the node
    take both pools' pods on any of its GPUs. Say so, per node."""
    notes = []
    for item in nodes:
        lent: dict[str, list[int]] = {}
        for gpu in item.gpus:
            if gpu.pool is not None and gpu.pool != item.node.pool:
                lent.setdefault(gpu.pool, []).append(gpu.index)
        for pool, indices in sorted(lent.items()):
            home = f"pool {item.node.pool}" if item.node.pool else "no pool"
            notes.append(
                f"node {item.name}: {gpu_list(indices)} in pool {pool} while the node is in "
                f"{home}; Kubernetes pools whole nodes, so the node is labelled for both and pods "
                "of either may use any of its GPUs (the plan's split inside the node is not enforced)"
            )
    return notes


def gpu_list(indices: list[int]) -> str:
    """`GPU 3`, `GPUs 0-3`, `GPUs 0, 2, 5-7`: how messages name GPUs of one node."""
    if not indices:
        return "no GPUs"
    ordered = sorted(set(indices))
    runs: list[str] = []
    start = prev = ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == prev + 1:
            prev = index
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if index is not None:
            start = prev = index
    word = "GPU" if len(ordered) == 1 else "GPUs"
    return f"{word} {', '.join(runs)}"
