"""gpuplex's own placement policy, `fgd-balanced`: FGD, with ties decided by the GPU models that
pods bound to a model need, then by CPU-GPU balance. Pure.

FGD (see `fgd`) scores nodes in whole points, so many nodes tie; the original breaks those ties at
random. `fgd-balanced` breaks them with two keys, one after the other:

1. *Model pressure*, for a pod that accepts any GPU model: the share of a model's GPUs that the
   workload's model-bound pods ask for (a pod bound to several models spreads its request over
   them by their GPU counts), in steps of `PRESSURE_STEP`. Among FGD's best nodes, such a pod goes
   to the model the bound pods need least, so the scarce models stay free for the pods that can
   run nowhere else. A workload without model-bound pods puts every model at 0: the key is then
   neutral. Pods bound to a model, and CPU-only pods, skip this key.
2. *GPU capacity stranded by CPU*: for a node,

       stranded = max(0, free GPU milli - free CPU milli / rho)

   where rho is the workload's CPU per milli-GPU: the CPU of *all* its pods, CPU-only ones
   included, over all their GPU milli. It is the GPU milli the node's remaining CPU cannot feed at
   the workload's usual ratio; CPU-only pods take their CPU from the same nodes, so leaving them
   out of rho (as the live planner may, where no CPU-only work exists) would leave GPUs without
   the CPU to use them wherever CPU-only pods are many. The pod goes where `stranded` grows least
   (or shrinks most).

Before both, and before FGD's score itself, one rule where pods come and go (`pods_leave`) and
the workload has multi-GPU pods: *whole nodes are kept for the work that needs them*. A pod that
would leave some of a node's GPUs over goes to a node with all its GPUs free only when no node
already in use can take it. FGD's typical pods are the frequent shapes, and multi-GPU pods are
rare by count (openb default: 44 eight-GPU pods of 8,152), so to FGD's score opening an idle
8-GPU node for a 1-GPU pod looks free; in a cluster where pods come and go those nodes are what
the 8-GPU pods wait for. Next, the nodes a *rare* multi-GPU pod needs are kept for it as far as
that rule allows: a multi-GPU pod shape that at most `RARE_HOST_SHARE` of the GPU nodes could
take even empty (by their CPU, memory, GPU count and model; openb default's 8-GPU pods asking
120 cores fit 3 of its 61 nodes) puts those nodes after the others among the nodes in use, and
among the idle ones. Without it, small long-running pods sent to nodes in use settled on exactly
those nodes, and the largest pods waited 6 to 9 times as long as under best-fit in two replays
of twelve; with it the longest wait is at most 2.6 times best-fit's, but the p99 at the lower
load is behind best-fit's (docs/benchmarks.md). Last, among the nodes those two rules leave
level, a GPU pod goes where the *fewest whole GPUs are left* after it: whole GPUs gather on a few
nodes, which a multi-GPU pod can take as soon as the small pods there leave, where FGD's score
alone spread small pods over nodes with many whole GPUs free (over 24 dynamic replays the longest
wait went from 0.884 to 0.819 of best-fit's, the worst from 1.96 to 1.40, the GPUs allocated from
1.021 to 1.040 of best-fit's, the p99 level). Where pods stay (a fleet filled once, capacity
planning) these rules cost packing, up to 10 points of allocation (openb cpuonly25), so they are
off there.

Where pods come and go, a *CPU-only pod* skips FGD's score and the whole-node rule: it goes off
the nodes kept for rare multi-GPU pods, then where GPU capacity stranded by CPU grows least
(ties to the first node). Sent to the nodes in use as GPU pods are, CPU-only pods used
up the CPU beside free GPUs there, and 1-GPU pods then waited for a whole GPU that only
CPU-exhausted nodes had; over 24 dynamic replays (openb default and gpushare40, 50x and 100x,
seeds 1-6) this took fgd-balanced's p99 delay from 1.029 to 0.991 of best-fit's.

Then to the node first in the tie-break order. The GPUs on the chosen node are FGD's. Measured on
openb and its variants in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpuplex.core.fragmentation.model import MILLI, BoolArray, FloatArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import (
    KEY_SPAN,
    MAX_SCORE,
    STRANDED_BOUND,
    balance_keys,
    stranded_gpu_milli,
)
from gpuplex.core.trace.fgd import FEW_NODES, FgdScorer
from gpuplex.core.trace.model import ClusterState, TraceNode
from gpuplex.core.trace.policies import Policy

#: for a pod that accepts any model, FGD scores this many points apart count alike before the
#: model pressure decides
BAND_POINTS = 10
#: model pressure counts in steps of this share of a model's GPUs (finer differences tie)
PRESSURE_STEP = 0.05
#: pressure beyond this many times a model's GPUs counts as this much
PRESSURE_CAP = 10.0
_PRESSURE_LEVELS = round(PRESSURE_CAP / PRESSURE_STEP) + 1
#: more than any primary key (FGD's score, banded with the model pressure): where whole nodes
#: are kept, the rank of `_kept_rank` counts in steps of this, above FGD's score
_PRIMARY_SPAN = (MAX_SCORE // BAND_POINTS + 1) * _PRESSURE_LEVELS * (MAX_SCORE + 1)
#: a multi-GPU pod shape that at most this share of the cluster's GPU nodes can take (by their
#: whole CPU, memory, GPUs and model) is rare, and the nodes that can take it are kept for it
RARE_HOST_SHARE = 0.1
#: where whole nodes are kept, nodes with this many whole GPUs or more left after a placement
#: count alike (openb's largest nodes have 8)
WHOLE_GPU_LEVELS = 9


def workload_cpu_per_gpu_milli(workload: Sequence[TracePod]) -> float | None:
    """rho: the CPU milli of all the workload's pods (CPU-only ones too) per milli-GPU they ask;
    None without GPU requests or without CPU (then CPU strands nothing)."""
    gpu_milli = sum(p.total_gpu_milli for p in workload)
    cpu_milli = sum(p.cpu_milli for p in workload)
    if gpu_milli <= 0 or cpu_milli <= 0:
        return None
    return cpu_milli / gpu_milli


def model_pressure(workload: Sequence[TracePod], capacity: dict[str, int]) -> dict[str, float]:
    """Per GPU model of the cluster (`capacity`: its GPUs): the GPUs the workload's model-bound
    pods ask of it, as a share of its GPUs; a pod bound to several models spreads its request
    over those the cluster has, by their GPU counts."""
    asked = dict.fromkeys(capacity, 0.0)
    for pod in workload:
        if not pod.wants_gpu or not pod.gpu_models:
            continue
        models = [m for m in pod.gpu_models if capacity.get(m, 0) > 0]
        gpus = sum(capacity[m] for m in models)
        for m in models:
            asked[m] += pod.total_gpu_milli / 1000 * capacity[m] / gpus
    return {m: asked[m] / capacity[m] if capacity[m] else 0.0 for m in capacity}


class BalancedFgdScorer(FgdScorer):
    """FGD's scores and GPU choice, its ties broken by model pressure, then by the growth of GPU
    milli stranded by CPU."""

    def __init__(self, workload: Sequence[TracePod], *, pods_leave: bool = False) -> None:
        super().__init__(workload)
        self.rho = workload_cpu_per_gpu_milli(workload)
        self._bound = tuple(p for p in workload if p.wants_gpu and p.gpu_models)
        self.keeps_whole_nodes = pods_leave and any(p.num_gpu > 1 for p in workload)
        self._pressure_of: tuple[tuple[str, ...], IntArray] | None = None
        self._large = (
            tuple(p for p in workload if p.num_gpu > 1 and p.wants_gpu)
            if self.keeps_whole_nodes
            else ()
        )
        self._reserved_of: tuple[tuple[TraceNode, ...], BoolArray] | None = None

    def reserved_nodes(self, state: ClusterState) -> BoolArray:
        """Per node: whether a rare multi-GPU pod shape of the workload can run there (see
        `RARE_HOST_SHARE`); all False where whole nodes are not kept."""
        if self._reserved_of is None or self._reserved_of[0] is not state.nodes:
            reserved = np.zeros(len(state.nodes), dtype=bool)
            gpu_nodes = sum(1 for node in state.nodes if node.gpus > 0)
            empty = ClusterState.empty(state.nodes)  # what each node could take with nothing on it
            for pod in self._large:  # `feasible` keeps one answer per request shape
                hosts = empty.feasible(pod)
                if hosts.sum() <= RARE_HOST_SHARE * gpu_nodes:
                    reserved |= hosts
            self._reserved_of = (state.nodes, reserved)
        return self._reserved_of[1]

    def pressure_levels(self, state: ClusterState) -> IntArray:
        """Per model position of `state`: its pressure in whole steps (0 without bound pods)."""
        if self._pressure_of is None or self._pressure_of[0] != state.models:
            capacity = dict.fromkeys(state.models, 0)
            for node, gpus in zip(state.nodes, state.gpu_count.tolist(), strict=True):
                capacity[node.model] += gpus
            pressure = model_pressure(self._bound, capacity)
            levels = np.array(
                [
                    np.floor(min(pressure[m], PRESSURE_CAP) / PRESSURE_STEP + 1e-9)
                    for m in state.models
                ],
                dtype=np.int64,
            )
            self._pressure_of = (state.models, levels)
        return self._pressure_of[1]

    def keys(self, state: ClusterState, pod: TracePod, nodes: IntArray, fgd: IntArray) -> IntArray:
        """One integer per node, higher is better: for a pod that accepts any GPU model in a
        workload with model-bound pods, FGD's score in bands of `BAND_POINTS`, then the model's
        spare (the less pressure the better), then FGD's score; for any other pod FGD's score.
        Where whole nodes are kept, above all that: nodes in use before idle ones the pod would
        split, then nodes no rare multi-GPU pod needs before those one does, then the fewer
        whole GPUs left after the pod the better (`_kept_rank`). Then the least growth of GPU
        milli stranded by CPU. A CPU-only pod, where whole nodes are kept: nodes
        no rare multi-GPU pod needs first, then the least growth of stranded GPU milli."""
        if self.keeps_whole_nodes and pod.num_gpu == 0 and self.rho is not None:
            others_first = np.where(self.reserved_nodes(state)[nodes], 0, 1)
            return balance_keys(others_first, stranded_growth(state, pod, nodes, self.rho))
        if nodes.size <= FEW_NODES:
            return self._keys_on_few(state, pod, nodes, fgd)
        primary = fgd
        if pod.wants_gpu and not pod.gpu_models and self._bound:
            spare = _PRESSURE_LEVELS - 1 - self.pressure_levels(state)[state.model_index[nodes]]
            primary = ((fgd // BAND_POINTS) * _PRESSURE_LEVELS + spare) * (MAX_SCORE + 1) + fgd
        if self.keeps_whole_nodes:
            whole_gpus = (state.gpu_left[nodes] == MILLI).sum(axis=1)
            splits = (whole_gpus == state.gpu_count[nodes]) & (pod.num_gpu < state.gpu_count[nodes])
            rank = _kept_rank(splits, self.reserved_nodes(state)[nodes], whole_gpus - _whole(pod))
            primary = rank * _PRIMARY_SPAN + primary
        if self.rho is None:
            return primary
        return balance_keys(primary, stranded_growth(state, pod, nodes, self.rho))

    def _keys_on_few(
        self, state: ClusterState, pod: TracePod, nodes: IntArray, fgd: IntArray
    ) -> IntArray:
        """`keys` in plain Python, for a few nodes: the same integer and IEEE float steps as
        numpy takes, so the same keys."""
        by_pressure = pod.wants_gpu and not pod.gpu_models and self._bound
        levels = self.pressure_levels(state).tolist()
        reserved = self.reserved_nodes(state) if self.keeps_whole_nodes else None
        out: list[int] = []
        for points, node in zip(fgd.tolist(), nodes.tolist(), strict=True):
            key = points
            if by_pressure:
                spare = _PRESSURE_LEVELS - 1 - levels[state.model_index[node]]
                key = ((points // BAND_POINTS) * _PRESSURE_LEVELS + spare) * (
                    MAX_SCORE + 1
                ) + points
            if reserved is not None:
                whole_gpus = sum(1 for left in state.gpu_left[node].tolist() if left == MILLI)
                splits = _splits_whole_node(state, pod, node)
                rank = _kept_rank(splits, reserved[node], whole_gpus - _whole(pod))
                key = int(rank) * _PRIMARY_SPAN + key
            if self.rho is not None:
                cpu = int(state.cpu_left[node])
                free = sum(g for g in state.gpu_left[node].tolist() if g > 0)
                before = max(0.0, free - cpu / self.rho)
                after = max(0.0, (free - pod.total_gpu_milli) - (cpu - pod.cpu_milli) / self.rho)
                growth = min(max(round(after - before), -STRANDED_BOUND), STRANDED_BOUND)
                key = key * KEY_SPAN + (STRANDED_BOUND - growth)
            out.append(key)
        return np.array(out, dtype=np.int64)


def _whole(pod: TracePod) -> int:
    """The whole GPUs the pod takes (none for a share of one)."""
    return pod.num_gpu if pod.gpu_milli >= MILLI else 0


def _kept_rank(
    splits: BoolArray | bool, reserved: BoolArray | bool, whole_left: IntArray | int
) -> IntArray:
    """Where whole nodes are kept, a node's rank for a GPU pod, higher is better (per node for
    arrays): nodes in use before idle ones the pod would split, then nodes no rare multi-GPU pod
    needs before those one does, then the fewer whole GPUs the node has left after the pod."""
    group = np.where(splits, 0, 2) + np.where(reserved, 0, 1)
    tight = WHOLE_GPU_LEVELS - 1 - np.clip(whole_left, 0, WHOLE_GPU_LEVELS - 1)
    rank: IntArray = group * WHOLE_GPU_LEVELS + tight
    return rank


def _splits_whole_node(state: ClusterState, pod: TracePod, node: int) -> bool:
    """Whether the node has every GPU free and the pod would leave some of them over."""
    count = int(state.gpu_count[node])
    whole = all(left == MILLI for left in state.gpu_left[node, :count].tolist())
    return whole and pod.num_gpu < count


def stranded_growth(state: ClusterState, pod: TracePod, nodes: IntArray, rho: float) -> FloatArray:
    """Per node: how much its GPU milli stranded by CPU (at `rho`) grows if the pod goes there."""
    left = state.gpu_left[nodes]
    free = np.where(left > 0, left, 0).sum(axis=1)
    cpu = state.cpu_left[nodes]
    before = stranded_gpu_milli(cpu, free, rho)
    after = stranded_gpu_milli(cpu - pod.cpu_milli, free - pod.total_gpu_milli, rho)
    growth: FloatArray = after - before
    return growth


def balanced_fgd_policy(workload: Sequence[TracePod], *, pods_leave: bool = False) -> Policy:
    """gpuplex's policy over `workload`: its typical pods, model pressure and CPU per milli-GPU;
    where `pods_leave`, whole nodes kept for its multi-GPU pods."""
    scorer = BalancedFgdScorer(workload, pods_leave=pods_leave)
    return Policy("fgd-balanced", scorer.score, scorer.pick_gpus, chooser=scorer.choose)
