"""What the placement code keeps between pods (F per node state, scores per shape and node state,
feasibility per shape, the FGD policies' own chooser) gives exactly what computing afresh gives, on
the few-node and the many-node paths."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from gpuplex.core.fragmentation.measure import (
    MEMO_BATCH,
    FragmentationModel,
    RememberedFragmentation,
    typical_pods,
)
from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.core.trace.balanced import BalancedFgdScorer
from gpuplex.core.trace.fgd import FEW_NODES, FgdScorer
from gpuplex.core.trace.policies import choose_by_scores

MODELS = ("T4", "V100", "A10")


def cluster(size: int) -> list[TraceNode]:
    return [
        TraceNode(f"n{i:02d}", 16_000 + 8_000 * (i % 5), 256 * 1024, 1 + i % 8, MODELS[i % 3])
        for i in range(size)
    ]


def workload() -> list[TracePod]:
    """Shares, whole and multi-GPU pods, CPU-only pods and model-bound pods."""
    shapes = [
        (4_000, 1, 250, ()),
        (8_000, 1, 500, ()),
        (2_000, 1, 700, ()),
        (12_000, 1, 1000, ()),
        (16_000, 2, 1000, ()),
        (6_000, 0, 0, ()),
        (8_000, 1, 1000, ("V100",)),
        (4_000, 1, 300, ("T4", "A10")),
    ]
    return [
        TracePod(f"p{i:03d}", cpu, 1024, num, milli, models)
        for i, (cpu, num, milli, models) in enumerate(shapes * 6)
    ]


def test_remembered_fragmentation_is_the_models_and_exact_alone_or_in_a_batch() -> None:
    model = FragmentationModel.build(typical_pods(workload()), MODELS)
    remembered = RememberedFragmentation(model)
    rng = np.random.default_rng(3)
    for size in (1, 2, 3, 5, 7, 16, MEMO_BATCH, MEMO_BATCH + 9) * 3:  # again: from the memo
        cpu = rng.integers(0, 6, size=size) * 4_000
        gpu = rng.integers(0, 5, size=(size, 8)) * 250
        gpu[:, rng.integers(1, 8) :] = -1  # absent slots
        models = rng.integers(0, len(MODELS), size=size)
        batch = model.units(cpu, gpu, models)
        assert remembered.units(cpu, gpu, models).tolist() == batch.tolist()
        alone = [
            model.units(cpu[i : i + 1], gpu[i : i + 1], models[i : i + 1])[0] for i in range(size)
        ]
        assert alone == batch.tolist()  # F x W of a state does not depend on its batch
        assert (
            model.fragmentation(cpu, gpu, models).tolist() == (batch / model.total_weight).tolist()
        )


@pytest.mark.parametrize(
    ("name", "pods_leave"), [("fgd", False), ("fgd-balanced", False), ("fgd-balanced", True)]
)
@pytest.mark.parametrize("size", [FEW_NODES // 2, 3 * FEW_NODES])
def test_the_policys_own_chooser_chooses_as_scoring_every_node_does(
    name: str, pods_leave: bool, size: int
) -> None:
    pods = workload()
    policy = policy_named(name, pods, pods_leave=pods_leave)
    assert policy.chooser is not None
    # its own scorer: no state shared with the chooser
    by_scores = policy_named(name, pods, pods_leave=pods_leave)
    states = [ClusterState.empty(cluster(size)), ClusterState.empty(cluster(size))]
    rng = np.random.default_rng(2)
    refused = 0
    for step, pod in enumerate(pods * (size // 2)):  # enough to fill both clusters
        state = states[(step // 5) % 2]  # the chooser moves between two states
        fast = policy.chooser(state, pod, rng)
        assert fast == choose_by_scores(state, pod, by_scores, rng)
        if fast is None:
            refused += 1
        else:
            state.place(fast.node, pod, fast.gpus)
    assert refused > 0  # the clusters filled up: "no node" was compared too


def test_feasibility_kept_per_shape_is_a_fresh_check() -> None:
    pods = workload()
    state = ClusterState.empty(cluster(30))
    policy = policy_named("best-fit")
    rng = np.random.default_rng(0)
    for pod in pods * 3:
        fresh = dataclasses.replace(state, changes=[], feasible_by_shape={})
        for shape in pods[:8]:
            assert state.feasible(shape).tolist() == fresh.feasible(shape).tolist()
        where = choose(state, pod, policy, rng)
        if where is not None:
            state.place(where.node, pod, where.gpus)
    assert len(state.changes) > 30


def balanced_where_pods_leave(pods: list[TracePod]) -> FgdScorer:
    return BalancedFgdScorer(pods, pods_leave=True)


@pytest.mark.parametrize("scorer", [FgdScorer, BalancedFgdScorer, balanced_where_pods_leave])
@pytest.mark.parametrize("size", [FEW_NODES // 2, 3 * FEW_NODES])
def test_kept_scores_are_a_fresh_scorers_on_one_state_and_on_two(
    scorer: Callable[[list[TracePod]], FgdScorer], size: int
) -> None:
    pods = workload()
    kept = scorer(pods)
    states = [ClusterState.empty(cluster(size)), ClusterState.empty(cluster(size))]
    policy = policy_named("fgd", pods)
    rng = np.random.default_rng(1)
    for step, pod in enumerate(pods * 2):
        state = states[(step // 7) % 2]  # the kept scorer moves between two states
        candidates = np.flatnonzero(state.feasible(pod))
        if candidates.size == 0:
            continue
        keys, slots = kept.scores(state, pod, candidates)
        fresh_keys, fresh_slots = scorer(pods).scores(state, pod, candidates)
        assert keys.tolist() == fresh_keys.tolist()
        assert slots.tolist() == fresh_slots.tolist()
        where = choose(state, pod, policy, rng)
        assert where is not None
        state.place(where.node, pod, where.gpus)
