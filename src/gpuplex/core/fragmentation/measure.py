"""GPU fragmentation of a node against the typical pods of a workload (FGD, Weng et al., ATC '23). Pure.

Re-implemented from the description and tests of the paper's simulator (`pkg/utils/frag.go`,
hkust-adsl/kubernetes-scheduler-simulator; none of its code taken):

- *Typical pods* are the distinct request shapes (CPU milli, GPU milli per GPU, GPU count, GPU
  models) of a pod list, most frequent first (ties: the larger shape first), taken one at a time
  until they cover `popularity` of the pods. Each keeps its pod count as its weight: its
  frequency is its weight over all the typical pods' weights. The paper's runs count CPU-only
  pods too and use a popularity of 95 %.
- For a node and a typical pod m, the node's free GPU milli counts as *fragment* unless m fits:
  a CPU-only pod never fits a GPU (all free GPU milli is fragment to it), nor does a pod the node's
  GPU model cannot serve, nor one lacking CPU or enough GPUs with room on the node. When m fits,
  only the GPUs with less room than m's share per GPU are fragment.
- F(n) = sum_m p_m * fragment_m(n), in milli-GPUs. FGD places a pod where F grows least.

F is computed exactly, in whole numbers: F x W, where W is the sum of the weights, is an integer
(`FragmentationModel.units`). So F of a node state is the same however it is computed, alone or in
a batch, in numpy or in plain Python, and can be remembered per state (`RememberedFragmentation`,
for the FGD scorer of `gpuplex.core.trace.fgd`, which asks about a few states at a time).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuplex.core.fragmentation.model import FloatArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import point_thresholds

#: the share of pods the typical pods cover in the paper's runs
DEFAULT_POPULARITY = 0.95


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """A request shape of the workload, weighted by how many of its pods have it."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 0 for a CPU-only pod
    num_gpu: int
    gpu_models: tuple[str, ...]  # empty: any model
    weight: int

    def serves(self, model: str) -> bool:
        """Can a GPU of `model` serve this shape (no models named: any can)?"""
        return not self.gpu_models or model in self.gpu_models


def frequencies(typical: Sequence[TypicalPod]) -> list[float]:
    """Each typical pod's share of their total weight."""
    total = sum(m.weight for m in typical)
    return [m.weight / total for m in typical]


def typical_pods(
    pods: Sequence[TracePod], *, popularity: float = DEFAULT_POPULARITY, cpu_pods: bool = True
) -> tuple[TypicalPod, ...]:
    """The most frequent shapes covering `popularity` of `pods`, weighted by their pod counts."""
    if not 0 < popularity <= 1:
        raise ValueError(f"popularity must be in (0, 1], not {popularity}")
    counts = Counter(
        (p.cpu_milli, p.gpu_milli if p.num_gpu else 0, p.num_gpu, p.gpu_models)
        for p in pods
        if cpu_pods or p.num_gpu > 0
    )
    total = sum(counts.values())
    if total == 0:
        return ()
    # most frequent first; equal counts: the larger shape first (models compared as "a|b")
    ranked = sorted(
        counts.items(),
        key=lambda item: (item[1], item[0][:3], "|".join(item[0][3])),
        reverse=True,
    )
    chosen: list[tuple[tuple[int, int, int, tuple[str, ...]], int]] = []
    covered = 0
    for shape, count in ranked:
        if covered >= popularity * total:
            break
        chosen.append((shape, count))
        covered += count
    return tuple(
        TypicalPod(cpu, milli, num, models, count) for (cpu, milli, num, models), count in chosen
    )


def node_fragmentation(
    cpu_left: int, gpu_left: Sequence[int], model: str, typical: Sequence[TypicalPod]
) -> float:
    """F of one node (its free CPU milli, free milli per GPU, GPU model): a plain reference."""
    free = sum(gpu_left)
    out = 0.0
    for m, frequency in zip(typical, frequencies(typical), strict=True):
        if m.gpu_milli == 0 or not m.serves(model):
            out += frequency * free  # a CPU-only pod or a model it cannot use: all fragment
            continue
        room = sum(1 for g in gpu_left if g >= m.gpu_milli)
        if room >= m.num_gpu and cpu_left >= m.cpu_milli:
            out += frequency * sum(g for g in gpu_left if g < m.gpu_milli)
        else:
            out += frequency * free
    return out


@dataclass(frozen=True, slots=True)
class FragmentationModel:
    """The typical pods as arrays, with which GPU models each can use (by model position), and
    the thresholds of FGD's whole-point score in F's units (`scores.point_thresholds`)."""

    cpu: IntArray  # (M,)
    gpu_milli: IntArray  # (M,)
    num_gpu: IntArray  # (M,)
    weight: IntArray  # (M,)
    serves: npt.NDArray[np.bool_]  # (models, M): model k serves typical pod m (and m wants a GPU)
    thresholds: IntArray  # (MAX_SCORE - 1,)

    @classmethod
    def build(cls, typical: Sequence[TypicalPod], models: Sequence[str]) -> FragmentationModel:
        if any(m.weight <= 0 for m in typical):
            raise ValueError("typical pods need positive weights")
        weight = np.array([m.weight for m in typical], dtype=np.int64)
        return cls(
            cpu=np.array([m.cpu_milli for m in typical], dtype=np.int64),
            gpu_milli=np.array([m.gpu_milli for m in typical], dtype=np.int64),
            num_gpu=np.array([m.num_gpu for m in typical], dtype=np.int64),
            weight=weight,
            serves=np.array(
                [[m.gpu_milli > 0 and m.serves(k) for m in typical] for k in models],
                dtype=np.bool_,
            ).reshape(len(models), len(typical)),
            thresholds=point_thresholds(max(int(weight.sum()), 1)),
        )

    @property
    def total_weight(self) -> int:
        """W: F x W is a whole number."""
        return max(int(self.weight.sum()), 1)

    def fragmentation(
        self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray
    ) -> FloatArray:
        """F per node state, in milli-GPUs: free CPU (S,), free milli per GPU slot (S, G; absent
        slots < 0)."""
        out: FloatArray = self.units(cpu_left, gpu_left, model_index) / self.total_weight
        return out

    def units(self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray) -> IntArray:
        """F x W per node state, exactly: where m fits, only the GPUs without room for it are
        fragment, so F x W = free x W - sum_m weight_m x (free milli on GPUs with room for m)."""
        gpu = np.maximum(gpu_left, 0)
        # (S, D, G): the GPUs with room for each distinct milli D the typical pods ask per GPU
        millis, milli_of = np.unique(self.gpu_milli, return_inverse=True)
        room = gpu[:, None, :] >= millis[None, :, None]
        fits = (
            self.serves[model_index]
            & (room.sum(axis=2)[:, milli_of] >= self.num_gpu[None, :])
            & (cpu_left[:, None] >= self.cpu[None, :])
        )
        usable = np.where(room, gpu[:, None, :], 0).sum(axis=2)[:, milli_of]
        kept = np.where(fits, usable, 0)
        out: IntArray = gpu.sum(axis=1) * self.total_weight - kept @ self.weight
        return out


#: `RememberedFragmentation.units` computes batches of more node states than this in one numpy
#: call rather than looking each up
MEMO_BATCH = 64
#: the memo of `RememberedFragmentation` starts afresh when it holds this many node states
MEMO_LIMIT = 200_000


class RememberedFragmentation:
    """F x W of node states, as `FragmentationModel.units` gives it, remembered per state for a
    caller that asks about a few states at a time, most of them seen before.

    F of a state depends only on its GPU model, which typical pods its free CPU can feed, and its
    free milli per GPU in any order: it is remembered per such key.
    """

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self.total_weight = model.total_weight
        self.thresholds: list[int] = model.thresholds.tolist()
        self._cpu_steps = sorted(set(model.cpu.tolist()))
        self._units: dict[tuple[int, int, tuple[int, ...]], int] = {}
        # per model position: per distinct milli per GPU, the (CPU, GPUs, weight) of the typical
        # pods the model serves that ask that milli
        self._typical: list[list[tuple[int, list[tuple[int, int, int]]]]] = []
        for serves in model.serves.tolist():
            by_milli: dict[int, list[tuple[int, int, int]]] = {}
            for served, cpu, milli, count, weight in zip(
                serves,
                model.cpu.tolist(),
                model.gpu_milli.tolist(),
                model.num_gpu.tolist(),
                model.weight.tolist(),
                strict=True,
            ):
                if served:
                    by_milli.setdefault(milli, []).append((cpu, count, weight))
            self._typical.append(sorted(by_milli.items()))

    def units(self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray) -> IntArray:
        """F x W per node state, as `FragmentationModel.units`."""
        if cpu_left.size > MEMO_BATCH:  # one numpy call is then cheaper than the lookups
            return self.model.units(cpu_left, gpu_left, model_index)
        return np.array(
            self.of_states(cpu_left.tolist(), gpu_left.tolist(), model_index.tolist()),
            dtype=np.int64,
        )

    def of_states(self, cpus: list[int], gpus: list[list[int]], models: list[int]) -> list[int]:
        """F x W of each node state given as plain values (free CPU, free milli per GPU slot,
        model position)."""
        if len(self._units) + len(cpus) > MEMO_LIMIT:
            self._units.clear()
        out: list[int] = []
        for cpu, gpu, model in zip(cpus, gpus, models, strict=True):
            key = (model, bisect_right(self._cpu_steps, cpu), tuple(sorted(gpu)))
            units = self._units.get(key)
            if units is None:
                units = self._units[key] = self._of_state(cpu, gpu, model)
            out.append(units)
        return out

    def of_state(self, cpu: int, gpu: list[int], model: int) -> int:
        """F x W of one node state given as plain values."""
        return self.of_sorted(model, self.cpu_step(cpu), tuple(sorted(gpu)), cpu)

    def cpu_step(self, cpu: int) -> int:
        """Which typical pods' CPU `cpu` can feed, as a number: states of one GPU model and the
        same free milli per GPU whose CPU has the same step have the same F."""
        return bisect_right(self._cpu_steps, cpu)

    def of_sorted(self, model: int, step: int, gpu: tuple[int, ...], cpu: int) -> int:
        """F x W of a node state given by its model position, CPU step (`cpu_step`), free milli
        per GPU in ascending order and free CPU."""
        key = (model, step, gpu)
        units = self._units.get(key)
        if units is None:
            if len(self._units) >= MEMO_LIMIT:
                self._units.clear()
            units = self._units[key] = self._of_state(cpu, list(gpu), model)
        return units

    def _of_state(self, cpu: int, gpu: list[int], model: int) -> int:
        """`FragmentationModel.units` of one node state, in plain Python (the same whole number;
        cheaper than numpy calls on one row)."""
        free = sum(g for g in gpu if g > 0)
        out = free * self.total_weight
        for milli, pods in self._typical[model]:
            room = [g for g in gpu if g >= milli]
            if not room:
                continue
            usable = sum(room)
            for cpu_asked, count, weight in pods:
                if cpu >= cpu_asked and len(room) >= count:
                    out -= weight * usable
        return out
