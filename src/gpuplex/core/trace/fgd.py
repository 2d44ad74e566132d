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

from gpuplex.core.fragmentation.measure import (
    FragmentationModel,
    RememberedFragmentation,
    typical_pods,
)
from gpuplex.core.fragmentation.model import BoolArray, FloatArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import sigmoid_score
from gpuplex.core.trace.model import ClusterState
from gpuplex.core.trace.policies import Policy, pick_best_gpu

#: up to this many nodes to score, `FgdScorer` works in plain Python rather than numpy calls
FEW_NODES = 16

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
    GPUs changed since: a pod costs the nodes changed since its shape was last scored, not the
    whole cluster, and F of the changed nodes is computed in the same numpy call as the new
    scores. The changed nodes are found in the state's log of placements (`ClusterState.changes`)
    when the state is the object seen last time; any other state is compared, node by node, with
    the copy of the last one kept here. Subclasses turn FGD's score into a finer key with `keys`,
    which must depend on the node and the pod's shape alone.
    """

    def __init__(self, workload: Sequence[TracePod]) -> None:
        self.typical = typical_pods(workload)
        self._models: tuple[str, ...] | None = None
        self._frag: RememberedFragmentation | None = None
        self._cpu: IntArray | None = None
        self._gpu: IntArray | None = None
        self._index: IntArray | None = None
        self._before: FloatArray = np.zeros(0)
        self._dirty: BoolArray = np.zeros(0, dtype=np.bool_)  # F in `_before` is out of date
        self._version: IntArray = np.zeros(0, dtype=np.int64)
        self._shapes: dict[ShapeKey, _ShapeScores] = {}
        self._earlier: BoolArray = np.zeros((0, 0), dtype=np.bool_)
        self._state: ClusterState | None = None  # the state the copies were last brought up to
        self._logged = 0  # how many of its `changes` they include

    def _sync(self, state: ClusterState) -> RememberedFragmentation:
        """Note which nodes changed since the last call (their F is then out of date)."""
        if self._frag is None or self._models != state.models:
            self._models = state.models
            self._frag = RememberedFragmentation(
                FragmentationModel.build(self.typical, state.models)
            )
            self._cpu = None
        if self._state is state and self._cpu is not None and self._logged <= len(state.changes):
            # the state seen last time: only the nodes it logged since can have changed
            if self._logged < len(state.changes):
                touched = sorted(set(state.changes[self._logged :]))
                self._logged = len(state.changes)
                self._note_changes(state, np.array(touched, dtype=np.int64))
            return self._frag
        cpu, gpu = state.cpu_left, state.gpu_left
        self._state, self._logged = state, len(state.changes)
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
        self._note_changes(state, np.arange(cpu.size, dtype=np.int64))  # another state: compare all
        return self._frag

    def _note_changes(self, state: ClusterState, nodes: IntArray) -> None:
        """Of `nodes`, mark those whose free CPU or GPUs differ from the copy kept as changed."""
        assert self._cpu is not None
        assert self._gpu is not None
        if nodes.size <= FEW_NODES:  # one by one: cheaper than numpy calls on a few rows
            changed = [
                n
                for n in nodes.tolist()
                if self._cpu[n] != state.cpu_left[n]
                or self._gpu[n].tolist() != state.gpu_left[n].tolist()
            ]
            for n in changed:
                self._cpu[n], self._gpu[n] = state.cpu_left[n], state.gpu_left[n]
                self._dirty[n] = True
                self._version[n] += 1
            return
        cpu, gpu = state.cpu_left[nodes], state.gpu_left[nodes]
        differ = (self._cpu[nodes] != cpu) | (self._gpu[nodes] != gpu).any(axis=1)
        changed_at = nodes[differ]
        if changed_at.size:
            self._cpu[changed_at], self._gpu[changed_at] = cpu[differ], gpu[differ]
            self._dirty[changed_at] = True
            self._version[changed_at] += 1

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
        frag: RememberedFragmentation,
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
        self, frag: RememberedFragmentation, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """FGD's score of the pod on each node, and the GPU slot for a shared pod (else -1)."""
        if nodes.size <= FEW_NODES:
            return self._fgd_on_few(frag, state, pod, nodes)
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

    def _fgd_on_few(
        self, frag: RememberedFragmentation, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """`_fgd` in plain Python, for a few nodes: the same candidate states in the same order,
        so F is computed on the same batch and comes out the same to the last bit."""
        width = state.gpu_left.shape[1]
        cpus: list[int] = (state.cpu_left[nodes] - pod.cpu_milli).tolist()
        lefts: list[list[int]] = state.gpu_left[nodes].tolist()
        models: list[int] = state.model_index[nodes].tolist()
        rows: list[tuple[int, list[int], int]] = []
        owners: list[int] = []  # per candidate state: its node's position in `nodes`
        slots: list[int] = []  # and the GPU slot a shared pod takes there
        shared, milli = pod.is_shared, pod.gpu_milli
        wanted = pod.num_gpu if pod.wants_gpu else 0
        for i, (left, cpu, model) in enumerate(zip(lefts, cpus, models, strict=True)):
            if shared:
                for g, room in enumerate(left):
                    if room >= milli and room not in left[:g]:  # first GPU of each room
                        after = list(left)
                        after[g] -= milli
                        rows.append((cpu, after, model))
                        owners.append(i)
                        slots.append(g)
                continue
            taken, after = 0, list(left)
            for g, room in enumerate(left):
                if taken < wanted and room >= milli:
                    after[g] -= milli  # the lowest-numbered GPUs with room
                    taken += 1
            rows.append((cpu, after, model))
            owners.append(i)
            slots.append(-1)
        dirty: list[int] = np.flatnonzero(self._dirty).tolist()
        if dirty:  # F of the changed nodes in the same batch, first, as `_fragmentation` does
            rows[:0] = zip(
                state.cpu_left[dirty].tolist(),
                state.gpu_left[dirty].tolist(),
                state.model_index[dirty].tolist(),
                strict=True,
            )
        f = frag.of_states([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
        if dirty:
            self._before[dirty] = f[: len(dirty)]
            self._dirty[dirty] = False
        owner = np.array(owners, dtype=np.int64)
        per_state = sigmoid_score(self._before[nodes[owner]] - f[len(dirty) :]).tolist()
        best = [-1] * nodes.size
        first = [width if shared else -1] * nodes.size
        for i, slot, points in zip(owners, slots, per_state, strict=True):
            if points > best[i]:  # slots come in order: the first best GPU wins
                best[i], first[i] = points, slot
        return np.array(best, dtype=np.int64), np.array(first, dtype=np.int64)

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
