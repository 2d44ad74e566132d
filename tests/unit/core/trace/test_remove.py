"""`ClusterState.remove` gives a pod's resources back, logs its node, and the FGD policies'
caches see the removal: after pods leave, every policy chooses as on a state built afresh."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named

NODES = [TraceNode(f"n{i}", 32_000, 128 * 1024, 4, "V100") for i in range(6)]
PODS = [
    TracePod(
        f"p{i}",
        2_000 + 1_000 * (i % 3),
        4096,
        1 if i % 4 else 2,
        1000 if i % 4 == 0 else 300 + 100 * (i % 5),
    )
    for i in range(30)
]


def test_remove_gives_back_what_place_took() -> None:
    state = ClusterState.empty(NODES)
    pod = TracePod("a", 4_000, 8_192, 1, 400)
    before = (state.cpu_left.copy(), state.memory_left.copy(), state.gpu_left.copy())
    state.place(2, pod, (1,))
    assert state.allocated_milli == 400
    state.remove(2, pod, (1,))
    assert np.array_equal(state.cpu_left, before[0])
    assert np.array_equal(state.memory_left, before[1])
    assert np.array_equal(state.gpu_left, before[2])
    assert state.changes == [2, 2]
    assert state.allocated_milli == 0


def test_remove_refuses_a_pod_the_gpu_does_not_hold() -> None:
    state = ClusterState.empty(NODES)
    with pytest.raises(ValueError, match="does not hold"):
        state.remove(0, TracePod("a", 1_000, 1_024, 1, 500), (0,))
    with pytest.raises(ValueError, match="holds 2 GPUs"):
        state.remove(0, TracePod("b", 1_000, 1_024, 2, 1000), (0,))
    assert state.changes == []


@pytest.mark.parametrize("name", ["best-fit", "fgd", "fgd-balanced"])
def test_policies_choose_after_removals_as_on_a_fresh_state(name: str) -> None:
    policy = policy_named(name, PODS)
    state = ClusterState.empty(NODES)
    placed = []
    for pod in PODS:
        choice = choose(state, pod, policy, np.random.default_rng(1))
        if choice is not None:
            state.place(choice.node, pod, choice.gpus)
            placed.append((pod, choice))
    for pod, choice in placed[::2]:  # every other pod leaves
        state.remove(choice.node, pod, choice.gpus)
    fresh = ClusterState.empty(NODES)
    for pod, choice in placed[1::2]:
        fresh.place(choice.node, pod, choice.gpus)
    assert np.array_equal(fresh.gpu_left, state.gpu_left)
    fresh_policy = policy_named(name, PODS)
    for pod in PODS[:12]:
        got = choose(state, pod, policy, np.random.default_rng(7))
        want = choose(fresh, pod, fresh_policy, np.random.default_rng(7))
        assert got == want
