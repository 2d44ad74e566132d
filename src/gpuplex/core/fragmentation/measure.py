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
"""

from __future__ import annotations

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
        gpu = np.maximum(gpu_left, 0)
        free = gpu.sum(axis=1).astype(np.float64)
        # (S, M, G): the GPUs with room for typical pod m
        room = gpu[:, None, :] >= self.gpu_milli[None, :, None]
        fits = (
            self.serves[model_index]
            & (room.sum(axis=2) >= self.num_gpu[None, :])
            & (cpu_left[:, None] >= self.cpu[None, :])
        )
        # where m fits, only the GPUs without room for it are fragment: free - (milli with room)
        usable = np.where(room, gpu[:, None, :], 0).sum(axis=2).astype(np.float64)
        kept = np.where(fits, usable, 0.0) @ self.frequency
        out: FloatArray = free * float(self.frequency.sum()) - kept
        return out
