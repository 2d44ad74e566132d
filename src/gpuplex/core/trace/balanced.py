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

The same two keys, one after the other, place shares in the live planner
(`gpuplex.core.fragmentation.scores`, where they are defined).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplex.core.fragmentation.model import IntArray, TracePod
from gpuplex.core.fragmentation.scores import balance_keys, cpu_per_gpu_milli, stranded_gpu_milli
from gpuplex.core.trace.fgd import FgdScorer
from gpuplex.core.trace.model import ClusterState
from gpuplex.core.trace.policies import Policy


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
