"""The scores placement by fragmentation gives a candidate, shared by the cluster policies `fgd` and
`fgd-balanced` (`gpuplex.core.trace`) and the live planner's shares
(`gpuplex.core.plan.share_fragmentation`). Pure.

- FGD's score: 100 * sigmoid((F before - F after) / 1000), truncated to whole points as
  kube-scheduler scores are (F: `measure.FragmentationModel.fragmentation`). F is exact in units
  of 1/W milli (W: the typical pods' total weight), so the score is counted exactly too: the
  number of points k in 1..99 whose threshold, the least decrease of F that reaches k points,
  the decrease meets (`point_thresholds`, `fgd_points`).
- The GPU capacity *stranded by CPU* on a node, `max(0, free GPU milli - free CPU milli / rho)`,
  where rho is the workload's CPU per milli-GPU (all its GPU pods' CPU over all their GPU milli):
  the GPU milli the node's remaining CPU cannot feed at the workload's usual ratio.
- `balance_keys`: FGD's score first, then the least growth of stranded GPU milli, as one integer
  key per candidate (why, and what it gains on openb: `gpuplex.core.trace.balanced`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplex.core.fragmentation.model import FloatArray, IntArray, TracePod

#: kube-scheduler's score range
MAX_SCORE = 100
#: |change of stranded GPU milli| is clipped to this before it joins the key (no node has more)
STRANDED_BOUND = 10_000_000
#: the span of one point of the primary key in `balance_keys`
KEY_SPAN = 2 * STRANDED_BOUND + 1


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
    out: IntArray = primary.astype(np.int64) * KEY_SPAN + (STRANDED_BOUND - growth)
    return out


def point_thresholds(total_weight: int) -> IntArray:
    """For k = 1..99: the least decrease of F, in units of 1/`total_weight` milli, for which
    100 * sigmoid(decrease / 1000) reaches k (k / (100 - k) = e^(decrease / 1000))."""
    k = np.arange(1, MAX_SCORE, dtype=np.float64)
    out: IntArray = np.ceil(1000.0 * total_weight * np.log(k / (MAX_SCORE - k))).astype(np.int64)
    return out


def fgd_points(decrease_units: IntArray, thresholds: IntArray) -> IntArray:
    """FGD's whole-point score per decrease of F (in the units of `thresholds`): 50 when F does
    not change, 0 to 99."""
    out: IntArray = np.searchsorted(thresholds, decrease_units, side="right").astype(np.int64)
    return out
