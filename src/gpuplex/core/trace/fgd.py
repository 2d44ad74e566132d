"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC '23): the paper's own policy. Pure.

The node, and for a shared pod the GPU on it, where the node's fragmentation against the workload's
typical pods (see `gpuplex.core.fragmentation`) grows least, scored
100 * sigmoid((F before - F after) / 1000), truncated to whole points as kube-scheduler scores are
(`fragmentation.scores.sigmoid_score`); equal scores go to the tie-break order. A shared pod takes
the first GPU with the best score, whole GPUs the lowest-numbered free ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplex.core.fragmentation.measure import FragmentationModel, typical_pods
from gpuplex.core.fragmentation.model import FloatArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import sigmoid_score
from gpuplex.core.trace.model import ClusterState
from gpuplex.core.trace.policies import Policy, pick_best_gpu


class FgdScorer:
    """FGD's scorer and GPU picker over one run's typical pods.

    F of each node's current state is kept between pods and recomputed only for the nodes whose
    free CPU or GPUs changed since (the state is compared, never trusted to be the same object).
    """

    def __init__(self, workload: Sequence[TracePod]) -> None:
        self.typical = typical_pods(workload)
        self._models: tuple[str, ...] | None = None
        self._frag: FragmentationModel | None = None
        self._cpu: IntArray | None = None
        self._gpu: IntArray | None = None
        self._before: FloatArray | None = None
        self._index: IntArray | None = None

    def _model(self, state: ClusterState) -> FragmentationModel:
        if self._frag is None or self._models != state.models:
            self._models = state.models
            self._frag = FragmentationModel.build(self.typical, state.models)
            self._cpu = self._gpu = self._before = None
        return self._frag

    def _current(self, state: ClusterState) -> FloatArray:
        """F of every node as it is now."""
        frag = self._model(state)
        cpu, gpu = state.cpu_left, state.gpu_left
        if (
            self._cpu is None
            or self._gpu is None
            or self._before is None
            or self._index is None
            or self._gpu.shape != gpu.shape
            or not np.array_equal(self._index, state.model_index)
        ):
            self._before = frag.fragmentation(cpu, gpu, state.model_index)
            self._index = state.model_index.copy()
        else:
            changed = np.flatnonzero((self._cpu != cpu) | (self._gpu != gpu).any(axis=1))
            if changed.size:
                self._before[changed] = frag.fragmentation(
                    cpu[changed], gpu[changed], state.model_index[changed]
                )
        self._cpu, self._gpu = cpu.copy(), gpu.copy()
        return self._before

    def scores(
        self, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Per node: the best score, and the GPU slot it takes for a shared pod (else -1)."""
        frag = self._model(state)
        before = self._current(state)[nodes]
        cpu_after = state.cpu_left[nodes] - pod.cpu_milli
        left = state.gpu_left[nodes]
        models = state.model_index[nodes]
        if pod.is_shared:
            # one candidate per node and GPU with room; equal rooms on a node give equal states,
            # so only the first GPU of each room is tried (the first best GPU wins, as in the original)
            fits = left >= pod.gpu_milli
            width = left.shape[1]
            earlier = np.tril(np.ones((width, width), dtype=np.bool_), k=-1)
            same = (left[:, :, None] == left[:, None, :]) & earlier[None, :, :]
            rows, slots = np.nonzero(fits & ~same.any(axis=2))
            after = left[rows].copy()
            after[np.arange(rows.size), slots] -= pod.gpu_milli
            f_after = frag.fragmentation(cpu_after[rows], after, models[rows])
            per_gpu = sigmoid_score(before[rows] - f_after)
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
        f_after = frag.fragmentation(cpu_after, after, models)
        return sigmoid_score(before - f_after), np.full(nodes.size, -1, dtype=np.int64)

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
