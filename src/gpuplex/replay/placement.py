"""Replay a cluster trace: pods arrive one at a time and a placement policy places each or fails it.

Faithful to the FGD paper's simulator runs (Weng et al., USENIX ATC '23, §5): the trace's pods are
ordered by name and shuffled with the seed; then pods drawn at random (with replacement) from the
trace, in name order, are appended until their GPU request would pass `inflate` x the cluster's
GPU capacity ("workload inflation"). Pods never leave. A pod that fits nowhere fails and is not
retried. Score ties go to the node first in a random node order drawn once per seed (the
original's node names carry such a permutation as a prefix and ties go to the smallest name).
After each pod, the GPU request that has *arrived* (placed or not) and the GPUs *allocated* are
recorded as % of capacity; `allocation_percent[i]` is, as in the original's analysis, the mean
allocation over the pods after which the arrived request rounds to `i` % (see `allocation_curve`).

The original's inflation loop stops at the first drawn pod whose *per-GPU* milli would pass the
target (not its total request); that quirk is kept so the number of pods matches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplex.core.fragmentation.model import IntArray
from gpuplex.core.trace import (
    POLICY_NAMES as _POLICY_NAMES,
    ClusterState,
    TraceNode,
    TracePod,
    choose,
    policy_named,
)

#: the policies `replay` knows, in the order reports show them
POLICY_NAMES: tuple[str, ...] = _POLICY_NAMES

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """One seed's allocation curve: allocated % of GPU capacity at each arrived % of capacity."""

    policy: str
    seed: int
    capacity_milli: int
    arrived_percent: list[int]
    allocation_percent: list[float]
    failed_pods: int = field(default=0)
    total_pods: int = field(default=0)

    def at(self, arrived: int) -> float:
        """The allocation % at `arrived` % of capacity arrived (see `allocation_curve`)."""
        return self.allocation_percent[self.arrived_percent.index(arrived)]


def arrival_order(
    pods: Sequence[TracePod], capacity_milli: int, *, inflate: float, rng: np.random.Generator
) -> list[TracePod]:
    """The trace's pods shuffled, then inflated with random draws up to `inflate` x capacity.

    A trace that asks for more than that loses pods drawn at random until it does not.
    """
    by_name = sorted(pods, key=lambda p: p.name)
    order = [by_name[i] for i in rng.permutation(len(by_name))]
    requested = sum(p.total_gpu_milli for p in order)
    target = inflate * capacity_milli
    if inflate <= 0 or not by_name or requested == target:
        return order
    if requested > target:  # a trace asking for more: drop pods at random (as the original)
        while requested > target:
            requested -= order.pop(int(rng.integers(len(order)))).total_gpu_milli
        return order
    while True:
        drawn = by_name[int(rng.integers(len(by_name)))]
        if requested + drawn.gpu_milli > target:
            break
        requested += drawn.total_gpu_milli
        order.append(drawn)
    return order


def allocation_curve(
    arrived_milli: IntArray, allocated_milli: IntArray, capacity_milli: int, points: list[int]
) -> list[float]:
    """Allocated % of capacity at each arrived % in `points`, from the per-pod records.

    As the original's analysis: the mean over the pods after which the arrived request, rounded to
    a whole percent, is the point; where none is, over those within one point of it; where none is
    either, the previous point's value (the original leaves such points out; 0 before any).
    """
    arrived = np.round(arrived_milli * 100 / capacity_milli)
    allocated = allocated_milli * 100 / capacity_milli
    curve: list[float] = []
    for point in points:
        near = allocated[arrived == point]
        if near.size == 0:
            near = allocated[np.abs(arrived - point) <= 1]
        curve.append(float(near.mean()) if near.size else (curve[-1] if curve else 0.0))
    return curve


def start_replay(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    *,
    inflate: float,
    rng: np.random.Generator,
) -> tuple[ClusterState, list[TracePod]]:
    """The empty cluster with the seed's node tie-break order, and the pods in arrival order.

    Both draw from `rng`, pods first: every replay of a seed (`replay`, the isolation
    comparison) must take these steps in this order to see the same run.
    """
    state = ClusterState.empty(tuple(nodes))
    if state.capacity_milli <= 0:
        raise ValueError("the cluster has no GPUs: an allocation ratio needs some")
    order = arrival_order(pods, state.capacity_milli, inflate=inflate, rng=rng)
    # the original breaks score ties by node name, and its node names start with a random
    # permutation of the nodes (sorted by name) drawn after the pods are shuffled and inflated
    by_name = sorted(range(len(state.nodes)), key=lambda i: state.nodes[i].name)
    permutation = rng.permutation(len(by_name))
    state.rank[np.array(by_name, dtype=np.int64)] = permutation
    return state, order


def replay(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    policy: str,
    *,
    seed: int,
    inflate: float = 1.3,
    on_progress: ProgressCallback | None = None,
) -> ReplayResult:
    """Place the (shuffled, inflated) pods one by one with `policy`; the allocation curve."""
    chosen = policy_named(policy, pods)
    rng = np.random.default_rng(seed)
    state, order = start_replay(nodes, pods, inflate=inflate, rng=rng)
    capacity = state.capacity_milli
    arrived_after = np.zeros(len(order), dtype=np.int64)  # per pod: arrived request after it
    allocated_after = np.zeros(len(order), dtype=np.int64)
    arrived = allocated = failed = 0
    for done, pod in enumerate(order, start=1):
        arrived += pod.total_gpu_milli
        choice = choose(state, pod, chosen, rng)
        if choice is None:
            failed += 1
        else:
            state.place(choice.node, pod, choice.gpus)
            allocated += pod.total_gpu_milli
        arrived_after[done - 1], allocated_after[done - 1] = arrived, allocated
        if on_progress is not None and (done % 256 == 0 or done == len(order)):
            on_progress(done, len(order))
    points = list(range(math.floor(inflate * 100 + 1e-9) + 1))
    curve = allocation_curve(arrived_after, allocated_after, capacity, points)
    return ReplayResult(
        policy=policy,
        seed=seed,
        capacity_milli=capacity,
        arrived_percent=points,
        allocation_percent=curve,
        failed_pods=failed,
        total_pods=len(order),
    )
