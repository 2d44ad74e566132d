"""GPU fragmentation of a node against the typical pods of a workload (FGD, Weng et al., ATC '23). Pure.

Re-implemented from the description and tests of the paper's simulator (`pkg/utils/frag.go`,
hkust-adsl/kubernetes-scheduler-simulator; none of its code taken):

- *Typical pods* are the distinct request shapes (CPU milli, GPU milli per GPU, GPU count, GPU
  models) of a pod list, most frequent first (ties: the larger shape first), taken one at a time
  until they cover `popularity` of the pods, with their frequencies renormalised to sum to 1. The
  paper's runs count CPU-only pods too and use a popularity of 95 %.
- For a node and a typical pod m, the node's free GPU milli counts as *fragment* unless m fits:
  a CPU-only pod never fits a GPU (all free GPU milli is fragment to it), nor does a pod the node's
  GPU model cannot serve, nor one lacking CPU or enough GPUs with room on the node. When m fits,
  only the GPUs with less room than m's share per GPU are fragment.
- F(n) = sum_m p_m * fragment_m(n), in milli-GPUs. FGD places a pod where F grows least.

`fragmentation` evaluates F on many node states at once: its cost is states x typical pods x GPUs.
`RememberedFragmentation` gives the same F, bit for bit, remembering each node state's part of it,
for callers that ask about a few states at a time (the FGD scorer of `gpuplex.core.trace.fgd`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpuplex.core.fragmentation.model import FloatArray, IntArray, TracePod

#: the share of pods the typical pods cover in the paper's runs
DEFAULT_POPULARITY = 0.95


@dataclass(frozen=True, slots=True)
class TypicalPod:
    """A request shape of the workload and its frequency among the typical pods."""

    cpu_milli: int
    gpu_milli: int  # per GPU; 0 for a CPU-only pod
    num_gpu: int
    gpu_models: tuple[str, ...]  # empty: any model
    frequency: float

    def serves(self, model: str) -> bool:
        """Can a GPU of `model` serve this shape (no models named: any can)?"""
        return not self.gpu_models or model in self.gpu_models


def typical_pods(
    pods: Sequence[TracePod], *, popularity: float = DEFAULT_POPULARITY, cpu_pods: bool = True
) -> tuple[TypicalPod, ...]:
    """The most frequent shapes covering `popularity` of `pods`, frequencies summing to 1."""
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
        TypicalPod(cpu, milli, num, models, count / covered)
        for (cpu, milli, num, models), count in chosen
    )


def node_fragmentation(
    cpu_left: int, gpu_left: Sequence[int], model: str, typical: Sequence[TypicalPod]
) -> float:
    """F of one node (its free CPU milli, free milli per GPU, GPU model): a plain reference."""
    free = sum(gpu_left)
    out = 0.0
    for m in typical:
        if m.gpu_milli == 0 or not m.serves(model):
            out += m.frequency * free  # a CPU-only pod or a model it cannot use: all fragment
            continue
        room = sum(1 for g in gpu_left if g >= m.gpu_milli)
        if room >= m.num_gpu and cpu_left >= m.cpu_milli:
            out += m.frequency * sum(g for g in gpu_left if g < m.gpu_milli)
        else:
            out += m.frequency * free
    return out


@dataclass(frozen=True, slots=True)
class FragmentationModel:
    """The typical pods as arrays, with which GPU models each can use (by model position)."""

    cpu: IntArray  # (M,)
    gpu_milli: IntArray  # (M,)
    num_gpu: IntArray  # (M,)
    frequency: FloatArray  # (M,)
    serves: npt.NDArray[np.bool_]  # (models, M): model k serves typical pod m (and m wants a GPU)

    @classmethod
    def build(cls, typical: Sequence[TypicalPod], models: Sequence[str]) -> FragmentationModel:
        return cls(
            cpu=np.array([m.cpu_milli for m in typical], dtype=np.int64),
            gpu_milli=np.array([m.gpu_milli for m in typical], dtype=np.int64),
            num_gpu=np.array([m.num_gpu for m in typical], dtype=np.int64),
            frequency=np.array([m.frequency for m in typical], dtype=np.float64),
            serves=np.array(
                [[m.gpu_milli > 0 and m.serves(k) for m in typical] for k in models],
                dtype=np.bool_,
            ).reshape(len(models), len(typical)),
        )

    def fragmentation(
        self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray
    ) -> FloatArray:
        """F per node state: free CPU (S,), free milli per GPU slot (S, G; absent slots < 0)."""
        free = np.maximum(gpu_left, 0).sum(axis=1).astype(np.float64)
        return self.from_kept(free, self.kept_milli(cpu_left, gpu_left, model_index))

    def kept_milli(
        self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray
    ) -> FloatArray:
        """Per node state and typical pod m (S, M): the free milli on GPUs with room for m where m
        fits on the node, else 0 (whole milli, so exact however it is computed)."""
        gpu = np.maximum(gpu_left, 0)
        # (S, D, G): the GPUs with room for each distinct milli D the typical pods ask per GPU
        millis, milli_of = np.unique(self.gpu_milli, return_inverse=True)
        room = gpu[:, None, :] >= millis[None, :, None]
        fits = (
            self.serves[model_index]
            & (room.sum(axis=2)[:, milli_of] >= self.num_gpu[None, :])
            & (cpu_left[:, None] >= self.cpu[None, :])
        )
        usable = np.where(room, gpu[:, None, :], 0).sum(axis=2)[:, milli_of].astype(np.float64)
        kept: FloatArray = np.where(fits, usable, 0.0)
        return kept

    def from_kept(
        self, free: FloatArray, kept_milli: FloatArray, total: float | None = None
    ) -> FloatArray:
        """F from each state's free GPU milli (S,) and `kept_milli` (S, M): where m fits, only the
        GPUs without room for it are fragment, so F = free - sum_m p_m * kept_m. `total`: the
        frequencies' sum, if the caller has it."""
        if total is None:
            total = float(self.frequency.sum())
        out: FloatArray = free * total - kept_milli @ self.frequency
        return out


#: `RememberedFragmentation.fragmentation` looks up batches up to this many node states; larger
#: ones are computed in one numpy call
MEMO_BATCH = 64
#: the memo of `RememberedFragmentation` starts afresh when it holds this many node states
MEMO_LIMIT = 200_000


class RememberedFragmentation:
    """F of node states as `FragmentationModel.fragmentation` gives it, bit for bit, for a caller
    that asks about a few states at a time, most of them seen before.

    `kept_milli` of a state depends only on its GPU model, which typical pods its free CPU can
    feed, and its free milli per GPU in any order, and it is whole milli: it is remembered per
    such key, in the rows of one table. F itself is always computed from the whole batch's
    `kept_milli` in one product, as `fragmentation` does (a product's last bits depend on the
    batch it is part of).
    """

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self._cpu_steps = sorted(set(model.cpu.tolist()))
        self._total = float(model.frequency.sum())
        self._row: dict[tuple[int, int, tuple[int, ...]], int] = {}  # key -> row of the table
        self._kept: FloatArray = np.zeros((1024, model.frequency.size), dtype=np.float64)
        self._free: FloatArray = np.zeros(1024, dtype=np.float64)
        # per model position: per typical pod, (does the model serve it, CPU, milli, GPUs)
        self._typical = [
            list(
                zip(
                    serves.tolist(),
                    model.cpu.tolist(),
                    model.gpu_milli.tolist(),
                    model.num_gpu.tolist(),
                    strict=True,
                )
            )
            for serves in model.serves
        ]

    def fragmentation(
        self, cpu_left: IntArray, gpu_left: IntArray, model_index: IntArray
    ) -> FloatArray:
        """F per node state, as `FragmentationModel.fragmentation`."""
        if cpu_left.size > MEMO_BATCH:  # one numpy call is then cheaper than the lookups
            return self.model.fragmentation(cpu_left, gpu_left, model_index)
        return self.of_states(cpu_left.tolist(), gpu_left.tolist(), model_index.tolist())

    def of_states(self, cpus: list[int], gpus: list[list[int]], models: list[int]) -> FloatArray:
        """F of each node state given as plain values (free CPU, free milli per GPU slot, model
        position), as `FragmentationModel.fragmentation` gives it on the same batch."""
        if not cpus:
            return np.zeros(0, dtype=np.float64)
        if len(self._row) + len(cpus) > MEMO_LIMIT:
            self._row.clear()
        rows: list[int] = []
        for cpu, gpu, model in zip(cpus, gpus, models, strict=True):
            key = (model, bisect_right(self._cpu_steps, cpu), tuple(sorted(gpu)))
            row = self._row.get(key)
            if row is None:
                row = self._remember(key, cpu, gpu, model)
            rows.append(row)
        return self.model.from_kept(self._free[rows], self._kept[rows], self._total)

    def _remember(
        self, key: tuple[int, int, tuple[int, ...]], cpu: int, gpu: list[int], model: int
    ) -> int:
        """Add the state's row to the table; its position."""
        row = len(self._row)
        if row == self._free.size:
            self._kept = np.concatenate([self._kept, np.zeros_like(self._kept)])
            self._free = np.concatenate([self._free, np.zeros_like(self._free)])
        self._kept[row] = self._kept_milli(cpu, gpu, model)
        self._free[row] = sum(g for g in gpu if g > 0)
        self._row[key] = row
        return row

    def _kept_milli(self, cpu: int, gpu: list[int], model: int) -> list[float]:
        """`FragmentationModel.kept_milli` of one node state, in plain Python (the same whole
        numbers: cheaper than numpy calls on one row)."""
        out: list[float] = []
        for serves, cpu_asked, milli, count in self._typical[model]:
            room = [g for g in gpu if g >= milli] if serves and cpu >= cpu_asked else []
            out.append(float(sum(room)) if room and len(room) >= count else 0.0)
        return out
