"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC '23): the paper's own policy. Pure.

The node, and for a shared pod the GPU on it, where the node's fragmentation against the workload's
typical pods (see `gpuplex.core.fragmentation`) grows least, scored
100 * sigmoid((F before - F after) / 1000), truncated to whole points as kube-scheduler scores are
(`fragmentation.scores.sigmoid_score`); equal scores go to the tie-break order. A shared pod takes
the first GPU with the best score, whole GPUs the lowest-numbered free ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.core.fragmentation.measure import FragmentationModel, typical_pods
from gpuplex.core.fragmentation.model import BoolArray, FloatArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import sigmoid_score
from gpuplex.core.trace.model import ClusterState
from gpuplex.core.trace.policies import Policy, pick_best_gpu

#: what a pod's score on a node depends on besides the node: the pod's request shape
ShapeKey = tuple[int, int, int, tuple[str, ...]]


@dataclass(slots=True)
class _ShapeScores:
    """One request shape's keys and GPU slots per node, each valid while the node's version is
    the one in `seen` (-1: never scored)."""

    key: IntArray
    slot: IntArray
    seen: IntArray


class FgdScorer:
    """FGD's scorer and GPU picker over one run's typical pods.

    A pod's score on a node depends only on that node's free CPU and GPUs and on the pod's request
    shape, and a placement changes one node. So F of each node's current state, and each shape's
    score on each node, are kept between pods and recomputed only for the nodes whose free CPU or
    GPUs changed since (the state is compared, never trusted to be the same object): a pod costs
    the nodes changed since its shape was last scored, not the whole cluster, and F of the changed
    nodes is computed in the same numpy call as the new scores. Subclasses turn FGD's score into a
    finer key with `keys`, which must depend on the node and the pod's shape alone.
    """

    def __init__(self, workload: Sequence[TracePod]) -> None:
        self.typical = typical_pods(workload)
        self._models: tuple[str, ...] | None = None
        self._frag: FragmentationModel | None = None
        self._cpu: IntArray | None = None
        self._gpu: IntArray | None = None
        self._index: IntArray | None = None
        self._before: FloatArray = np.zeros(0)
        self._dirty: BoolArray = np.zeros(0, dtype=np.bool_)  # F in `_before` is out of date
        self._version: IntArray = np.zeros(0, dtype=np.int64)
        self._shapes: dict[ShapeKey, _ShapeScores] = {}
        self._earlier: BoolArray = np.zeros((0, 0), dtype=np.bool_)

    def _sync(self, state: ClusterState) -> FragmentationModel:
        """Note which nodes changed since the last call (their F is then out of date)."""
        if self._frag is None or self._models != state.models:
            self._models = state.models
            self._frag = FragmentationModel.build(self.typical, state.models)
            self._cpu = None
        cpu, gpu = state.cpu_left, state.gpu_left
        if (
            self._cpu is None
            or self._gpu is None
            or self._index is None
            or self._gpu.shape != gpu.shape
            or not np.array_equal(self._index, state.model_index)
        ):
            self._index = state.model_index.copy()
            self._cpu, self._gpu = cpu.copy(), gpu.copy()
            self._before = np.zeros(cpu.size, dtype=np.float64)
            self._dirty = np.ones(cpu.size, dtype=np.bool_)
            self._version = np.zeros(cpu.size, dtype=np.int64)
            self._shapes = {}
            width = gpu.shape[1]
            self._earlier = np.tril(np.ones((width, width), dtype=np.bool_), k=-1)
            return self._frag
        changed = np.flatnonzero((self._cpu != cpu) | (self._gpu != gpu).any(axis=1))
        if changed.size:
            self._cpu[changed], self._gpu[changed] = cpu[changed], gpu[changed]
            self._dirty[changed] = True
            self._version[changed] += 1
        return self._frag

    def scores(
        self, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Per node: its key (FGD's score, or a subclass's finer key), and the GPU slot the pod
        takes there when it is a shared pod (else -1)."""
        frag = self._sync(state)
        shape = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_models)
        cached = self._shapes.get(shape)
        if cached is None:
            size = state.cpu_left.size
            cached = _ShapeScores(
                np.zeros(size, dtype=np.int64),
                np.zeros(size, dtype=np.int64),
                np.full(size, -1, dtype=np.int64),
            )
            self._shapes[shape] = cached
        stale = nodes[cached.seen[nodes] != self._version[nodes]]
        if stale.size:
            best, slot = self._fgd(frag, state, pod, stale)
            cached.key[stale], cached.slot[stale] = self.keys(state, pod, stale, best), slot
            cached.seen[stale] = self._version[stale]
        return cached.key[nodes], cached.slot[nodes]

    def keys(self, state: ClusterState, pod: TracePod, nodes: IntArray, fgd: IntArray) -> IntArray:
        """The key a node is chosen by (higher wins): here FGD's own score."""
        return fgd

    def _fragmentation(
        self,
        frag: FragmentationModel,
        state: ClusterState,
        cpu: IntArray,
        gpu: IntArray,
        models: IntArray,
    ) -> FloatArray:
        """F of the given node states, after bringing F of the changed nodes up to date in the
        same call."""
        dirty = np.flatnonzero(self._dirty)
        if dirty.size:
            cpu = np.concatenate([state.cpu_left[dirty], cpu])
            gpu = np.concatenate([state.gpu_left[dirty], gpu])
            models = np.concatenate([state.model_index[dirty], models])
        f = frag.fragmentation(cpu, gpu, models)
        if dirty.size:
            self._before[dirty] = f[: dirty.size]
            self._dirty[dirty] = False
        return f[dirty.size :]

    def _fgd(
        self, frag: FragmentationModel, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """FGD's score of the pod on each node, and the GPU slot for a shared pod (else -1)."""
        cpu_after = state.cpu_left[nodes] - pod.cpu_milli
        left = state.gpu_left[nodes]
        models = state.model_index[nodes]
        if pod.is_shared:
            # one candidate per node and GPU with room; equal rooms on a node give equal states,
            # so only the first GPU of each room is tried (the first best GPU wins, as in the original)
            fits = left >= pod.gpu_milli
            same = (left[:, :, None] == left[:, None, :]) & self._earlier[None, :, :]
            rows, slots = np.nonzero(fits & ~same.any(axis=2))
            after = left[rows].copy()
            after[np.arange(rows.size), slots] -= pod.gpu_milli
            f_after = self._fragmentation(frag, state, cpu_after[rows], after, models[rows])
            per_gpu = sigmoid_score(self._before[nodes][rows] - f_after)
            best = np.full(nodes.size, -1, dtype=np.int64)
            np.maximum.at(best, rows, per_gpu)
            first = np.full(nodes.size, left.shape[1], dtype=np.int64)
            top = per_gpu == best[rows]
            np.minimum.at(first, rows[top], slots[top])
            return best, first
        after = left
        if pod.wants_gpu:
            fits = left >= pod.gpu_milli
            taken = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)  # the lowest-numbered
            after = left - np.where(taken, pod.gpu_milli, 0)
        f_after = self._fragmentation(frag, state, cpu_after, after, models)
        score = sigmoid_score(self._before[nodes] - f_after)
        return score, np.full(nodes.size, -1, dtype=np.int64)

    def score(self, state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
        return self.scores(state, pod, nodes)[0]

    def pick_gpus(
        self, state: ClusterState, node: int, pod: TracePod, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if not pod.is_shared:
            return pick_best_gpu(state, node, pod, rng)
        _, slot = self.scores(state, pod, np.array([node], dtype=np.int64))
        return (int(slot[0]),)


def fgd_policy(workload: Sequence[TracePod]) -> Policy:
    """FGD over the typical pods of `workload` (computed once, here)."""
    fgd = FgdScorer(workload)
    return Policy("fgd", fgd.score, fgd.pick_gpus)
