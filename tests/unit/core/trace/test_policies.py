"""Cluster placement policies on hand-checkable clusters: feasibility, scores, tie-breaks, GPUs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.trace import (
    POLICIES,
    ClusterState,
    TraceNode,
    TracePod,
    choose,
    policy_named,
)
from gpuplex.core.trace.policies import (
    pick_best_gpu,
    pick_random_gpu,
    score_best_fit,
    score_dot_product,
    score_gpu_packing,
)


def node(name: str, gpus: int = 8, cpu: int = 96_000, model: str = "T4") -> TraceNode:
    return TraceNode(name, cpu, 512 * 1024, gpus, model)


def pod(
    cpu: int = 8_000, num_gpu: int = 1, milli: int = 1000, models: tuple[str, ...] = ()
) -> TracePod:
    return TracePod("p", cpu, 1024, num_gpu, milli, models)


def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def all_nodes(state: ClusterState) -> np.ndarray:
    return np.arange(len(state.nodes))


def test_empty_state_counts_capacity_and_pads_missing_gpus() -> None:
    state = ClusterState.empty([node("a", gpus=2), node("b", gpus=1)])
    assert state.capacity_milli == 3000
    assert state.allocated_milli == 0
    assert state.gpu_left.tolist() == [[1000, 1000], [1000, -1]]


def test_feasible_checks_cpu_memory_model_and_gpu_room() -> None:
    state = ClusterState.empty([node("a", cpu=4_000), node("b", model="V100"), node("c", gpus=1)])
    assert state.feasible(pod(cpu=8_000)).tolist() == [False, True, True]
    assert state.feasible(pod(cpu=1_000, models=("V100",))).tolist() == [False, True, False]
    assert state.feasible(pod(cpu=1_000, num_gpu=2)).tolist() == [True, True, False]
    big_memory = TracePod("m", 1_000, 600 * 1024, 0, 0)
    assert not state.feasible(big_memory).any()


def test_a_pod_without_gpus_ignores_the_gpu_model_and_room() -> None:
    state = ClusterState.empty([node("a", gpus=1, model="P100")])
    state.place(0, pod(cpu=0), (0,))
    assert state.feasible(TracePod("cpu", 1_000, 1, 0, 0, ("A100",))).tolist() == [True]


def test_place_takes_the_request_and_refuses_a_gpu_without_room() -> None:
    state = ClusterState.empty([node("a", gpus=2)])
    state.place(0, pod(milli=600), (1,))
    assert state.gpu_left[0].tolist() == [1000, 400]
    assert state.cpu_left[0] == 88_000
    assert state.allocated_milli == 600
    with pytest.raises(ValueError, match="no room"):
        state.place(0, pod(milli=600), (1,))
    with pytest.raises(ValueError, match="needs 2 GPUs"):
        state.place(0, pod(num_gpu=2), (0,))


def test_best_fit_scores_the_leftover_after_placing() -> None:
    # node a: 96 of 128 cores and 8 of 8 GPUs free; a pod of 32 cores and 1 GPU leaves
    # (64/128 + 7/8) / 2 = 0.6875 -> 100 * 0.3125 = 31; node b (2 GPUs): (64/128 + 1/8)/2 -> 68
    state = ClusterState.empty([node("a"), node("b", gpus=2)])
    assert score_best_fit(state, pod(cpu=32_000), all_nodes(state)).tolist() == [31, 68]
    choice = choose(state, pod(cpu=32_000), POLICIES["best-fit"], rng())
    assert choice is not None
    assert choice.node == 1


def test_gpu_packing_prefers_a_shared_gpu_then_a_used_node_then_small_idle_nodes() -> None:
    state = ClusterState.empty([node("idle8"), node("idle2", gpus=2), node("used"), node("shared")])
    state.place(2, pod(), (0,))  # node "used": one whole GPU taken, 7 free
    state.place(3, pod(milli=700), (0,))  # node "shared": GPU 0 has 300 left
    scores = score_gpu_packing(state, pod(milli=200), all_nodes(state)).tolist()
    # idle: max(33 - free, free); used node, one free GPU: 50 - 1; shared: 100 - 30 // 10
    assert scores == [25, 31, 49, 97]
    whole = score_gpu_packing(state, pod(num_gpu=2), all_nodes(state)).tolist()
    assert whole == [25, 31, 48, 48]
    assert score_gpu_packing(state, pod(num_gpu=0, milli=0), all_nodes(state)).tolist() == [0] * 4


def test_dot_product_scores_the_smaller_alignment_higher() -> None:
    # a: left (96/128, 8/8) . asked (32/128, 1/8) = 0.1875 + 0.125 -> 100 * (1 - 0.15625) = 84
    # b: left (96/128, 2/8) . asked = 0.1875 + 0.03125 -> 100 * (1 - 0.109375) = 89
    state = ClusterState.empty([node("a"), node("b", gpus=2)])
    assert score_dot_product(state, pod(cpu=32_000), all_nodes(state)).tolist() == [84, 89]


def test_ties_go_to_the_lowest_rank() -> None:
    nodes = [node("a"), node("b"), node("c")]
    state = ClusterState.empty(nodes, rank=np.array([2, 0, 1]))
    for name in ("first-fit", "best-fit", "gpu-packing", "dot-product"):
        choice = choose(state, pod(), policy_named(name), rng())
        assert choice is not None
        assert choice.node == 1, name
    with pytest.raises(ValueError, match="permutation"):
        ClusterState.empty(nodes, rank=np.array([0, 0, 1]))


def test_random_draws_among_feasible_nodes_only() -> None:
    state = ClusterState.empty([node("a"), node("tiny", cpu=1_000), node("c")])
    generator = rng()
    seen = set()
    for _ in range(200):
        choice = choose(state, pod(), POLICIES["random"], generator)
        assert choice is not None
        seen.add(choice.node)
    assert seen == {0, 2}


def test_no_feasible_node_is_none() -> None:
    state = ClusterState.empty([node("a", gpus=1)])
    assert choose(state, pod(num_gpu=2), POLICIES["best-fit"], rng()) is None


def test_gpu_pickers() -> None:
    state = ClusterState.empty([node("a", gpus=4)])
    state.place(0, pod(milli=500), (1,))
    state.place(0, pod(milli=800), (2,))
    # a share goes to the fitting GPU with the least room: GPU 1 (500 left) for 300
    assert pick_best_gpu(state, 0, pod(milli=300), rng()) == (1,)
    assert pick_best_gpu(state, 0, pod(milli=600), rng()) == (0,)
    # whole GPUs: the lowest-numbered free ones
    assert pick_best_gpu(state, 0, pod(num_gpu=2), rng()) == (0, 3)
    assert pick_random_gpu(state, 0, pod(num_gpu=2), rng()) == (0, 3)
    assert pick_best_gpu(state, 0, pod(num_gpu=0, milli=0), rng()) == ()
    generator = rng()
    drawn = {pick_random_gpu(state, 0, pod(milli=150), generator) for _ in range(100)}
    assert drawn == {(0,), (1,), (2,), (3,)}


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="best-fit"):
        policy_named("tetris")


gpu_models = st.sampled_from(["T4", "V100"])
trace_nodes = st.lists(
    st.builds(
        TraceNode,
        name=st.just("n"),
        cpu_milli=st.integers(0, 64_000),
        memory_mib=st.integers(0, 4096),
        gpus=st.integers(0, 8),
        model=gpu_models,
    ),
    min_size=1,
    max_size=6,
)
trace_pods = st.lists(
    st.one_of(
        st.builds(TracePod, st.just("cpu"), st.integers(0, 16_000), st.integers(0, 1024), st.just(0), st.just(0)),
        st.builds(TracePod, st.just("share"), st.integers(0, 16_000), st.integers(0, 1024), st.just(1), st.integers(1, 999), st.tuples(gpu_models)),
        st.builds(TracePod, st.just("whole"), st.integers(0, 16_000), st.integers(0, 1024), st.integers(1, 4), st.just(1000)),
    ),
    max_size=30,
)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(
    nodes=trace_nodes,
    pods=trace_pods,
    name=st.sampled_from(sorted(POLICIES)),
    seed=st.integers(0, 9),
)
def test_every_policy_places_only_where_the_pod_fits(
    nodes: list[TraceNode], pods: list[TracePod], name: str, seed: int
) -> None:
    state = ClusterState.empty(nodes, rank=np.random.default_rng(seed).permutation(len(nodes)))
    generator = np.random.default_rng(seed)
    placed = 0
    for p in pods:
        feasible = state.feasible(p)
        choice = choose(state, p, POLICIES[name], generator)
        if choice is None:
            assert not feasible.any()
            continue
        assert feasible[choice.node]
        assert len(set(choice.gpus)) == len(choice.gpus) == (p.num_gpu if p.wants_gpu else 0)
        state.place(choice.node, p, choice.gpus)
        placed += p.total_gpu_milli
    assert (state.cpu_left >= 0).all()
    assert (state.memory_left >= 0).all()
    real = np.arange(state.gpu_left.shape[1]) < state.gpu_count[:, None]
    assert (state.gpu_left[real] >= 0).all()
    assert (state.gpu_left[~real] == -1).all()
    assert state.allocated_milli == placed
