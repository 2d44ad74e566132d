"""Trace values (the nodes of a cluster trace; its pods are `fragmentation.model.TracePod`) and the
mutable cluster state a replay fills. GPU amounts are in milli-GPUs: 1000 is one whole GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuplex.core.fragmentation.model import MILLI, BoolArray, IntArray, TracePod

#: up to this many changed nodes, `ClusterState.feasible` checks them one by one in plain Python
_FEW_NODES = 8

#: what decides on which nodes a pod fits: CPU, memory, GPU milli, GPU count and GPU models
FeasibleShape = tuple[int, int, int, int, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class TraceNode:
    """A node of a cluster trace: its CPU (milli-cores), memory (MiB) and GPUs of one model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(slots=True)
class ClusterState:
    """What is left on each node, as arrays indexed by node (and GPU slot on the node).

    `gpu_left[n, g]` is the milli-GPUs free on GPU `g` of node `n`; slots past a node's GPU count
    hold -1 so that no request ever fits them and they never count as free GPUs.

    The arrays change only through `place` and `remove`, which log the node they changed in
    `changes`: what was computed for a node stays true until the node shows up there again
    (a removal included: caches keyed on a node's state renew it). `feasible` keeps its
    answer per request shape that way, and a scorer that holds on to this state object reads the
    log to find the nodes to score again (`trace.fgd`).
    """

    nodes: tuple[TraceNode, ...]
    cpu_left: IntArray
    memory_left: IntArray
    gpu_left: IntArray  # shape (nodes, max GPUs per node)
    gpu_count: IntArray
    models: tuple[str, ...]  # the distinct GPU models, in order of first appearance
    model_index: IntArray  # per node: its model's position in `models`
    rank: IntArray  # per node: its place in the tie-break order (lowest wins a tie)
    changes: list[int] = field(default_factory=list)  # the node of each change, in order
    #: per request shape: which nodes can take it, valid up to that many entries of `changes`
    feasible_by_shape: dict[FeasibleShape, tuple[BoolArray, int]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def empty(
        cls, nodes: tuple[TraceNode, ...] | list[TraceNode], rank: IntArray | None = None
    ) -> ClusterState:
        """The cluster with nothing placed on it; ties go to the lowest `rank` (default: order)."""
        nodes = tuple(nodes)
        if rank is None:
            rank = np.arange(len(nodes), dtype=np.int64)
        if sorted(int(r) for r in rank) != list(range(len(nodes))):
            raise ValueError("rank must be a permutation of the node positions")
        width = max((n.gpus for n in nodes), default=0)
        width = max(width, 1)
        gpu_left = np.full((len(nodes), width), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            gpu_left[i, : node.gpus] = MILLI
        models = tuple(dict.fromkeys(n.model for n in nodes))
        position = {m: i for i, m in enumerate(models)}
        return cls(
            nodes=nodes,
            cpu_left=np.array([n.cpu_milli for n in nodes], dtype=np.int64),
            memory_left=np.array([n.memory_mib for n in nodes], dtype=np.int64),
            gpu_left=gpu_left,
            gpu_count=np.array([n.gpus for n in nodes], dtype=np.int64),
            models=models,
            model_index=np.array([position[n.model] for n in nodes], dtype=np.int64),
            rank=np.asarray(rank, dtype=np.int64),
        )

    @property
    def capacity_milli(self) -> int:
        """All the cluster's GPUs, in milli-GPUs."""
        return int(self.gpu_count.sum()) * MILLI

    @property
    def allocated_milli(self) -> int:
        """The milli-GPUs handed out to pods so far."""
        free = int(np.where(self.gpu_left > 0, self.gpu_left, 0).sum())
        return self.capacity_milli - free

    def feasible(self, pod: TracePod) -> BoolArray:
        """Per node: can the pod be placed there (CPU, memory, GPU model and GPU room)?"""
        shape = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_models)
        known = self.feasible_by_shape.get(shape)
        if known is None:
            ok = self.feasible_on(pod, slice(None))
        else:
            ok, logged = known
            if logged < len(self.changes):
                changed = set(self.changes[logged:])
                if len(changed) <= _FEW_NODES:
                    for node in changed:
                        ok[node] = self.fits_on(pod, node)
                else:
                    at = np.array(sorted(changed), dtype=np.int64)
                    ok[at] = self.feasible_on(pod, at)
        self.feasible_by_shape[shape] = (ok, len(self.changes))
        return ok.copy()

    def feasible_on(self, pod: TracePod, nodes: IntArray | slice) -> BoolArray:
        """`feasible` on the given nodes, computed afresh."""
        ok: BoolArray = (self.cpu_left[nodes] >= pod.cpu_milli) & (
            self.memory_left[nodes] >= pod.memory_mib
        )
        if not pod.wants_gpu:
            return ok  # a pod without GPUs passes the GPU checks on any node
        if pod.gpu_models:
            wanted = [i for i, m in enumerate(self.models) if m in pod.gpu_models]
            ok &= np.isin(self.model_index[nodes], wanted)
        fitting = (self.gpu_left[nodes] >= pod.gpu_milli).sum(axis=1)
        ok &= fitting >= pod.num_gpu
        return ok

    def fits_on(self, pod: TracePod, node: int) -> bool:
        """`feasible` on one node, in plain Python (cheaper than numpy calls on one row)."""
        if self.cpu_left[node] < pod.cpu_milli or self.memory_left[node] < pod.memory_mib:
            return False
        if not pod.wants_gpu:
            return True
        if pod.gpu_models and self.models[self.model_index[node]] not in pod.gpu_models:
            return False
        return sum(1 for g in self.gpu_left[node].tolist() if g >= pod.gpu_milli) >= pod.num_gpu

    def place(self, node: int, pod: TracePod, gpus: tuple[int, ...]) -> None:
        """Take the pod's request from node `node`, its GPU share from GPU slots `gpus`."""
        if len(gpus) != (pod.num_gpu if pod.wants_gpu else 0):
            raise ValueError(f"pod {pod.name} needs {pod.num_gpu} GPUs, given {gpus}")
        self.changes.append(node)  # first: a refused GPU below leaves the CPU already taken
        self.cpu_left[node] -= pod.cpu_milli
        self.memory_left[node] -= pod.memory_mib
        for g in gpus:
            if self.gpu_left[node, g] < pod.gpu_milli:
                raise ValueError(f"GPU {g} of node {node} has no room for pod {pod.name}")
            self.gpu_left[node, g] -= pod.gpu_milli

    def remove(self, node: int, pod: TracePod, gpus: tuple[int, ...]) -> None:
        """Give back what `place(node, pod, gpus)` took: the pod has left the node."""
        if len(gpus) != (pod.num_gpu if pod.wants_gpu else 0):
            raise ValueError(f"pod {pod.name} holds {pod.num_gpu} GPUs, given {gpus}")
        for g in gpus:
            if self.gpu_left[node, g] + pod.gpu_milli > MILLI:
                raise ValueError(f"GPU {g} of node {node} does not hold pod {pod.name}")
        self.changes.append(node)
        self.cpu_left[node] += pod.cpu_milli
        self.memory_left[node] += pod.memory_mib
        for g in gpus:
            self.gpu_left[node, g] += pod.gpu_milli
