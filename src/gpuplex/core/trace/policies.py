"""Placement policies: score the nodes a pod fits on, then pick the GPUs on the chosen node. Pure.

Each policy is faithful to the baseline of the same name in the FGD paper's simulator (Weng et al.,
USENIX ATC '23), re-implemented from its description and behaviour:

- `random`: any feasible node, uniformly (drawn before scoring, as the original's pre-score step
  does); on it, any GPU with room, uniformly.
- `first-fit`: every feasible node scores alike, so the tie-break order decides: the first feasible
  node in the (per-seed) node order; the best-fitting GPU on it.
- `best-fit`: the node with the least CPU and GPU left over after placing, each side weighed 1/2
  and normalised by the largest node spec (128 cores, 8 GPUs); scores are whole points out of 100.
- `gpu-packing`: prefer sharing an already-used GPU (the fuller the better), then using free GPUs
  on a node that is already in use (fewer is better), then opening an idle node.
- `dot-product`: Tetris's alignment score on (CPU, GPU) normalised by the largest node spec; as in
  the original, a *smaller* dot product of what is left and what is asked scores higher.

Nodes with equal (integer) scores go to the node ranked first in the state's tie-break order, as
in the original (its kube-scheduler picks the smallest node name, and node names there start with
a random permutation drawn once per seed; a replay passes such a permutation as the rank). GPUs on
the chosen node: a whole-GPU pod takes the lowest-numbered free GPUs; a shared pod takes the GPU
with the least room that still fits (first one on ties), or a random fitting GPU for `random`.

A policy is a name, a node scorer and a GPU picker, and may bring its own `chooser` that gives the
same choice as scoring every feasible node would, faster (FGD's keeps each request shape's scores
of every node between pods and rescores only the nodes placements changed). FGD and gpuplex's own policy, which learn from
the run's workload, are in `fgd` and `balanced`; `registry.policy_named` finds any of them by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuplex.core.fragmentation.model import MILLI, IntArray, TracePod
from gpuplex.core.fragmentation.scores import MAX_SCORE
from gpuplex.core.trace.model import ClusterState

#: the largest node spec the original normalises by: 128 cores and 8 GPUs
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8 * MILLI

NodeScorer = Callable[[ClusterState, TracePod, IntArray], IntArray]
GpuPicker = Callable[[ClusterState, int, TracePod, np.random.Generator], tuple[int, ...]]
Chooser = Callable[[ClusterState, TracePod, np.random.Generator], "Choice | None"]


@dataclass(frozen=True, slots=True)
class Policy:
    """Scores candidate nodes (higher is better) and picks the GPUs on the chosen one."""

    name: str
    score: NodeScorer
    pick_gpus: GpuPicker
    random_node: bool = False  # ignore scores: any feasible node, uniformly
    chooser: Chooser | None = None  # `choose` for this policy, when it has a faster way


@dataclass(frozen=True, slots=True)
class Choice:
    """Where a pod goes: a node (its index in the trace) and the GPU slots on it."""

    node: int
    gpus: tuple[int, ...]


def choose(
    state: ClusterState, pod: TracePod, policy: Policy, rng: np.random.Generator
) -> Choice | None:
    """The policy's placement for the pod, or None when no node can take it."""
    if policy.chooser is not None:
        return policy.chooser(state, pod, rng)
    return choose_by_scores(state, pod, policy, rng)


def choose_by_scores(
    state: ClusterState, pod: TracePod, policy: Policy, rng: np.random.Generator
) -> Choice | None:
    """`choose` by scoring every node the pod fits on: the highest score, ties to the lowest
    rank."""
    candidates = np.flatnonzero(state.feasible(pod))
    if candidates.size == 0:
        return None
    if policy.random_node:
        node = int(candidates[rng.integers(candidates.size)])
        return Choice(node, policy.pick_gpus(state, node, pod, rng))
    scores = policy.score(state, pod, candidates)
    best = candidates[scores == scores.max()]
    node = int(best[0] if best.size == 1 else best[np.argmin(state.rank[best])])
    return Choice(node, policy.pick_gpus(state, node, pod, rng))


# -- GPU pickers --------------------------------------------------------------------------------


def _fitting(state: ClusterState, node: int, pod: TracePod) -> IntArray:
    return np.flatnonzero(state.gpu_left[node] >= pod.gpu_milli)


def _pick(
    state: ClusterState, node: int, pod: TracePod, share: Callable[[IntArray], int]
) -> tuple[int, ...]:
    """Every picker alike for whole GPUs (the lowest-numbered free ones); `share` chooses among
    the fitting GPUs for a fractional pod."""
    if not pod.wants_gpu:
        return ()
    fitting = _fitting(state, node, pod)
    if not pod.is_shared:
        return tuple(int(g) for g in fitting[: pod.num_gpu])
    return (int(fitting[share(fitting)]),)


def pick_best_gpu(
    state: ClusterState, node: int, pod: TracePod, rng: np.random.Generator
) -> tuple[int, ...]:
    """Whole GPUs: the lowest-numbered free ones. A share: the fitting GPU with the least room."""
    return _pick(state, node, pod, lambda fitting: int(np.argmin(state.gpu_left[node, fitting])))


def pick_random_gpu(
    state: ClusterState, node: int, pod: TracePod, rng: np.random.Generator
) -> tuple[int, ...]:
    """Whole GPUs: the lowest-numbered free ones. A share: any fitting GPU, uniformly."""
    return _pick(state, node, pod, lambda fitting: int(rng.integers(fitting.size)))


# -- node scorers -------------------------------------------------------------------------------


def _gpu_total_left(state: ClusterState, nodes: IntArray) -> IntArray:
    left = state.gpu_left[nodes]
    total: IntArray = np.where(left > 0, left, 0).sum(axis=1)
    return total


def score_first_fit(state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
    """Every feasible node alike: the tie-break order decides."""
    return np.zeros(nodes.size, dtype=np.int64)


def score_best_fit(state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
    """100 * (1 - (CPU left after / 128 cores + GPU left after / 8 GPUs) / 2), truncated."""
    cpu_after = (state.cpu_left[nodes] - pod.cpu_milli).astype(np.float64)
    gpu_after = (_gpu_total_left(state, nodes) - pod.total_gpu_milli).astype(np.float64)
    waste = cpu_after / MAX_SPEC_CPU_MILLI * 0.5
    waste = waste + gpu_after / MAX_SPEC_GPU_MILLI * 0.5
    return np.trunc((1.0 - waste) * MAX_SCORE).astype(np.int64)


def score_gpu_packing(state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
    """Share a used GPU (50..100, fuller is better) > free GPUs on a used node (33..49) > idle node."""
    if not pod.wants_gpu:
        return np.zeros(nodes.size, dtype=np.int64)
    left = np.sort(state.gpu_left[nodes], axis=1)  # least room first (absent slots are -1)
    free = (left == MILLI).sum(axis=1)
    fits = left >= pod.gpu_milli
    used = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)  # the GPUs it would take
    free_used = (used & (left == MILLI)).sum(axis=1)
    room_pct = np.where(used, left * 100 // MILLI, 0).sum(axis=1)
    shared = np.maximum(MAX_SCORE - room_pct // 10, MAX_SCORE // 2)
    on_used_node = np.maximum(MAX_SCORE // 2 - free_used, MAX_SCORE // 3)
    idle = np.maximum(MAX_SCORE // 3 - free, free)
    idle_node = free == state.gpu_count[nodes]
    out: IntArray = np.where(idle_node, idle, np.where(free_used > 0, on_used_node, shared))
    return out.astype(np.int64)


def score_dot_product(state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
    """100 * (1 - (left . asked) / 2), both as (CPU / 128 cores, GPU / 8 GPUs), truncated."""
    cpu_left = state.cpu_left[nodes].astype(np.float64) / MAX_SPEC_CPU_MILLI
    gpu_left = _gpu_total_left(state, nodes).astype(np.float64) / MAX_SPEC_GPU_MILLI
    dot = cpu_left * (pod.cpu_milli / MAX_SPEC_CPU_MILLI)
    dot = dot + gpu_left * (pod.total_gpu_milli / MAX_SPEC_GPU_MILLI)
    return np.trunc(MAX_SCORE * (1.0 - dot / 2)).astype(np.int64)


POLICIES: dict[str, Policy] = {
    "random": Policy("random", score_first_fit, pick_random_gpu, random_node=True),
    "first-fit": Policy("first-fit", score_first_fit, pick_best_gpu),
    "best-fit": Policy("best-fit", score_best_fit, pick_best_gpu),
    "gpu-packing": Policy("gpu-packing", score_gpu_packing, pick_best_gpu),
    "dot-product": Policy("dot-product", score_dot_product, pick_best_gpu),
}
