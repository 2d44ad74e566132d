"""gpuplex's own placement policy, `fgd-balanced`: FGD, with ties decided by CPU-GPU balance. Pure.

FGD (see `fgd`) scores nodes in whole points, so many nodes tie; the original breaks those ties at
random. On the openb trace much of what FGD still leaves unallocated sits on nodes whose CPU is
used up: GPUs are free there, but no pod that wants them finds the CPU to run. `fgd-balanced`
breaks FGD's ties by that loss instead. For a node, the GPU capacity *stranded by CPU* is

    stranded = max(0, free GPU milli - free CPU milli / rho)

where rho is the workload's CPU per milli-GPU (all its GPU pods' CPU over all their GPU milli):
the GPU milli the node's remaining CPU cannot feed at the workload's usual ratio. Among the nodes
with FGD's best score, a pod goes where `stranded` grows least (or shrinks most), then to the node
first in the tie-break order. So a CPU-hungry pod (or a CPU-only one) lands where CPU is to spare
and a CPU-light one where CPU is short, and fewer GPUs end up with no CPU to use them. The GPUs on
the chosen node are FGD's. Measured on openb in docs/benchmarks.md.

The same two keys, one after the other, place shares in the live planner (`balance_keys`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplex.core.plan.cluster.fgd import FgdScorer
from gpuplex.core.plan.cluster.fragmentation import FloatArray
from gpuplex.core.plan.cluster.model import ClusterState, IntArray, TracePod
from gpuplex.core.plan.cluster.policies import Policy

#: |change of stranded GPU milli| is clipped to this before it joins the key (no node has more)
STRANDED_BOUND = 10_000_000
_SPAN = 2 * STRANDED_BOUND + 1


def cpu_per_gpu_milli(workload: Sequence[TracePod]) -> float | None:
    """rho: the workload's GPU pods' CPU milli per milli-GPU they ask; None without GPU pods or
    when they ask no CPU (then CPU strands nothing and the tie-break is FGD's own)."""
    gpu_milli = sum(p.total_gpu_milli for p in workload if p.wants_gpu)
    cpu_milli = sum(p.cpu_milli for p in workload if p.wants_gpu)
    if gpu_milli <= 0 or cpu_milli <= 0:
        return None
    return cpu_milli / gpu_milli


def stranded_gpu_milli(cpu_left: IntArray, gpu_free: IntArray, rho: float) -> FloatArray:
    """Per node: free GPU milli beyond what its free CPU can feed at `rho` CPU per milli-GPU."""
    out: FloatArray = np.maximum(0.0, gpu_free - cpu_left / rho)
    return out


def balance_keys(primary: IntArray, stranded_growth: FloatArray) -> IntArray:
    """One integer key per candidate, higher is better: `primary` first (FGD's whole-point
    score), then the least growth of stranded GPU milli (rounded to whole milli)."""
    growth = np.clip(np.rint(stranded_growth), -STRANDED_BOUND, STRANDED_BOUND).astype(np.int64)
    out: IntArray = primary.astype(np.int64) * _SPAN + (STRANDED_BOUND - growth)
    return out


class BalancedFgdScorer(FgdScorer):
    """FGD's scores and GPU choice, its ties broken by the growth of GPU milli stranded by CPU."""

    def __init__(self, workload: Sequence[TracePod]) -> None:
        super().__init__(workload)
        self.rho = cpu_per_gpu_milli(workload)

    def score(self, state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
        primary = super().score(state, pod, nodes)
        if self.rho is None:
            return primary
        left = state.gpu_left[nodes]
        free = np.where(left > 0, left, 0).sum(axis=1)
        cpu = state.cpu_left[nodes]
        before = stranded_gpu_milli(cpu, free, self.rho)
        after = stranded_gpu_milli(cpu - pod.cpu_milli, free - pod.total_gpu_milli, self.rho)
        return balance_keys(primary, after - before)


def balanced_fgd_policy(workload: Sequence[TracePod]) -> Policy:
    """gpuplex's policy over `workload`: its typical pods and its CPU per milli-GPU."""
    scorer = BalancedFgdScorer(workload)
    return Policy("fgd-balanced", scorer.score, scorer.pick_gpus)
