"""FGD: typical pods, node fragmentation (the original simulator's test vectors), the `fgd` policy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.fragmentation.measure import (
    FragmentationModel,
    TypicalPod,
    frequencies,
    node_fragmentation,
    typical_pods,
)
from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.core.trace.registry import POLICY_NAMES

# The typical-pod lists of the original's pkg/utils/frag_test.go (TestingGenerateGetTypicalPods and
# TestingGenerateGetTypicalPodsWithNonGpu): (CPU milli, GPU milli per GPU, GPUs, model, percent).
MIXED = [
    (6000, 465, 1, "", 9.33), (8000, 440, 1, "2080", 9.15), (8000, 475, 1, "T4", 8.76),
    (8000, 440, 1, "P100", 8.72), (2000, 465, 1, "", 8.68), (12000, 900, 1, "", 8.65),
    (4000, 900, 1, "", 8.43), (16000, 678, 1, "T4", 8.36), (8000, 500, 1, "", 8.29),
    (6000, 511, 1, "", 8.11), (14000, 1000, 2, "2080", 0.54), (4000, 1000, 1, "2080", 0.43),
    (32000, 1000, 2, "T4", 0.43), (16000, 1000, 1, "V100M16", 0.40), (64000, 1000, 2, "", 0.40),
    (10000, 1000, 2, "", 0.40), (11400, 1000, 1, "T4", 0.36), (16000, 1000, 1, "T4", 0.36),
    (4000, 1000, 2, "", 0.36), (14000, 1000, 2, "V100M16", 0.36), (8000, 1000, 4, "", 0.36),
    (16000, 1000, 2, "", 0.32), (2000, 1000, 1, "T4", 0.32), (6000, 1000, 1, "", 0.32),
    (4000, 1000, 1, "", 0.32), (5000, 1000, 1, "", 0.32), (32000, 1000, 4, "V100M16", 0.32),
    (32000, 1000, 2, "", 0.32), (24000, 1000, 8, "2080", 0.32), (40000, 1000, 4, "", 0.29),
    (32000, 1000, 8, "", 0.29), (32000, 1000, 1, "T4", 0.29), (16000, 1000, 1, "", 0.25),
    (7000, 1000, 1, "V100M16", 0.25), (24000, 1000, 1, "T4", 0.25),
]  # fmt: skip
WITH_CPU_ONLY = [
    (15700, 1000, 1, "", 28.69), (11900, 1000, 1, "", 18.93), (11400, 1000, 1, "", 12.27),
    (1000, 0, 0, "", 7.36), (18710, 1000, 1, "", 4.85), (8200, 1000, 1, "", 3.79),
    (16400, 1000, 1, "", 3.31), (9810, 1000, 1, "", 1.97), (15200, 1000, 1, "", 1.87),
    (11200, 1000, 1, "", 1.81), (14200, 1000, 1, "", 1.76), (12000, 0, 0, "", 1.65),
    (14900, 1000, 1, "", 1.39), (60200, 1000, 4, "", 1.23), (64200, 1000, 8, "", 1.07),
    (32200, 1000, 4, "", 1.01), (17400, 1000, 2, "", 0.91), (30200, 1000, 2, "", 0.69),
    (16000, 1000, 1, "", 0.64), (15000, 1000, 1, "", 0.59), (64000, 1000, 8, "", 0.53),
    (15000, 0, 0, "", 0.53), (11910, 1000, 1, "", 0.53), (120200, 1000, 8, "", 0.48),
    (11300, 1000, 1, "", 0.37), (30000, 1000, 2, "", 0.32), (9800, 1000, 1, "", 0.32),
    (8000, 1000, 1, "", 0.32), (2000, 1000, 1, "", 0.27), (2000, 80, 1, "", 0.27),
    (1000, 1000, 1, "", 0.27),
]  # fmt: skip


def typical(rows: list[tuple[int, int, int, str, float]]) -> list[TypicalPod]:
    return [
        TypicalPod(cpu, milli, num, (model,) if model else (), round(pct * 100))
        for cpu, milli, num, model, pct in rows
    ]


def vectorised(cpu: int, gpus: list[int], model: str, pods: list[TypicalPod]) -> float:
    frag = FragmentationModel.build(pods, [model])
    left = np.array([gpus], dtype=np.int64)
    out = frag.fragmentation(np.array([cpu]), left, np.zeros(1, dtype=np.int64))
    return float(out[0])


# TestNodeGpuShareFragAmount / TestNodeGpuShareFragAmountScore and
# TestNodeGpuShareFragAmountWithNonGpu: (free CPU, free milli per GPU, model, list, F)
VECTORS = [
    (1000, [200, 1000, 1000, 500], "1080", MIXED, 2566.62),
    (1000, [1000] * 4, "1080", MIXED, 3802.40),
    (1000, [1000] * 8, "1080", MIXED, 7604.80),
    (1000, [200, 1000, 1000, 500], "1080", MIXED[:1], 251.91),  # lacks CPU: all 2,700 count
    (64000, [1000] * 8, "P100", WITH_CPU_ONLY, 887.20),
    (32000, [1000] * 4 + [0] * 4, "P100", WITH_CPU_ONLY, 554.4),
    (0, [1000] * 4 + [0] * 4, "P100", WITH_CPU_ONLY, 4000.0),
]


@pytest.mark.parametrize(("cpu", "gpus", "model", "rows", "expected"), VECTORS)
def test_the_original_vectors(
    cpu: int,
    gpus: list[int],
    model: str,
    rows: list[tuple[int, int, int, str, float]],
    expected: float,
) -> None:
    pods = typical(rows)
    # the original's percentages add up to less than 100 (its lists are cut at a popularity);
    # gpuplex's weights are frequencies over their own sum, so its F is the original's over that
    share = sum(row[4] for row in rows) / 100
    want = expected / share
    assert node_fragmentation(cpu, gpus, model, pods) == pytest.approx(want, abs=0.01 / share)
    assert vectorised(cpu, gpus, model, pods) == pytest.approx(want, abs=0.01 / share)


@pytest.mark.parametrize(
    ("gpus", "pod", "expected"),
    [  # TestGetGpuFragMilliByNodeResAndPodRes: the GPUs with less room than the pod's share
        ([200, 1000, 1000, 500], (100, 1000, 2), 700.0),
        ([1000] * 4, (100, 1000, 2), 0.0),
        ([1000] * 8, (100, 1000, 2), 0.0),
        ([200, 1000, 1000, 500], (100, 200, 2), 0.0),
    ],
)
def test_a_fitting_pod_counts_only_the_gpus_too_small_for_it(
    gpus: list[int], pod: tuple[int, int, int], expected: float
) -> None:
    pods = [TypicalPod(*pod, (), 1)]
    assert node_fragmentation(1000, gpus, "1080", pods) == expected
    assert vectorised(1000, gpus, "1080", pods) == expected


def test_a_model_the_pod_cannot_use_is_all_fragment() -> None:
    pods = [TypicalPod(1000, 500, 1, ("V100",), 1)]
    assert node_fragmentation(8000, [1000, 300], "T4", pods) == 1300.0
    assert node_fragmentation(8000, [1000, 300], "V100", pods) == 300.0


def trace_pod(name: str, cpu: int, milli: int = 1000, num: int = 1) -> TracePod:
    return TracePod(name, cpu, 1024, num, milli)


def test_typical_pods_cover_the_popularity_and_renormalise() -> None:
    pods = (
        [trace_pod(f"a{i}", 4000, 500) for i in range(6)]
        + [trace_pod(f"b{i}", 8000) for i in range(3)]
        + [trace_pod("c", 2000, 0, 0)]
    )
    got = typical_pods(pods, popularity=0.85)
    # 6 then 3 pods cover 90 % >= 85 %: the CPU-only shape is left out, the rest renormalised
    assert [(t.cpu_milli, t.gpu_milli, t.num_gpu) for t in got] == [(4000, 500, 1), (8000, 1000, 1)]
    assert [t.weight for t in got] == [6, 3]
    assert frequencies(got) == pytest.approx([6 / 9, 3 / 9])
    assert len(typical_pods(pods)) == 3  # 95 %: all three
    assert [t.num_gpu for t in typical_pods(pods, cpu_pods=False)] == [1, 1]
    assert typical_pods([]) == ()
    with pytest.raises(ValueError, match="popularity"):
        typical_pods(pods, popularity=0)


def test_typical_pods_with_equal_counts_put_the_larger_shape_first() -> None:
    pods = [trace_pod("a", 2000), trace_pod("b", 8000), trace_pod("c", 4000)]
    assert [t.cpu_milli for t in typical_pods(pods, popularity=0.5)] == [8000, 4000]


shapes = st.tuples(
    st.integers(0, 16_000),
    st.sampled_from([0, 100, 250, 500, 800, 1000]),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([(), ("T4",), ("V100",)]),
    st.integers(1, 100),
)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(shapes, min_size=1, max_size=8),
    states=st.lists(
        st.tuples(
            st.integers(0, 32_000),
            st.lists(st.integers(0, 1000), min_size=1, max_size=8),
            st.sampled_from(["T4", "V100"]),
        ),
        min_size=1,
        max_size=6,
    ),
)
def test_vectorised_fragmentation_matches_the_reference(
    rows: list[tuple[int, int, int, tuple[str, ...], int]],
    states: list[tuple[int, list[int], str]],
) -> None:
    pods = [
        TypicalPod(cpu, milli, num if milli else 0, models, p)
        for cpu, milli, num, models, p in rows
    ]
    models = ["T4", "V100"]
    frag = FragmentationModel.build(pods, models)
    left = np.full((len(states), 8), -1, dtype=np.int64)
    for i, (_, gpus, _) in enumerate(states):
        left[i, : len(gpus)] = gpus
    got = frag.fragmentation(
        np.array([s[0] for s in states], dtype=np.int64),
        left,
        np.array([models.index(s[2]) for s in states], dtype=np.int64),
    )
    want = [node_fragmentation(cpu, gpus, model, pods) for cpu, gpus, model in states]
    assert got.tolist() == pytest.approx(want, abs=1e-6)


# -- the policy ---------------------------------------------------------------------------------


def node(name: str, gpus: int = 4, cpu: int = 64_000, model: str = "T4") -> TraceNode:
    return TraceNode(name, cpu, 512 * 1024, gpus, model)


def test_fgd_is_registered_and_built_from_the_workload() -> None:
    assert "fgd" in POLICY_NAMES
    policy = policy_named("fgd", [trace_pod("a", 4000, 500)])
    assert policy.name == "fgd"


def test_fgd_shares_the_gpu_that_leaves_the_least_fragment() -> None:
    # the workload: 600-milli shares, so a GPU with less than 600 left is fragment
    workload = [trace_pod(f"w{i}", 1000, 600) for i in range(10)]
    policy = policy_named("fgd", workload)
    state = ClusterState.empty([node("a"), node("b")])
    state.place(0, trace_pod("x", 1000, 300), (2,))  # a: GPU 2 has 700 left, F = 0
    state.place(1, trace_pod("y", 1000, 500), (1,))  # b: GPU 1 has 500 left, F = 500
    # 200 on b's GPU 1: F 500 -> 300, score trunc(100 sigmoid(0.2)) = 54; a free GPU: 50;
    # a's GPU 2: F 0 -> 500, 37
    choice = choose(state, trace_pod("p", 1000, 200), policy, np.random.default_rng(0))
    assert choice is not None
    assert (choice.node, choice.gpus) == (1, (1,))
    # 700 fills a's GPU 2 exactly (F stays 0: 50); on any free GPU it strands 300 (42)
    choice = choose(state, trace_pod("q", 1000, 700), policy, np.random.default_rng(0))
    assert choice is not None
    assert (choice.node, choice.gpus) == (0, (2,))


def test_fgd_keeps_whole_nodes_for_whole_gpu_pods() -> None:
    # the workload is mostly 4-GPU pods: a 1-GPU pod goes to the node already broken into
    workload = [trace_pod(f"w{i}", 1000, 1000, 4) for i in range(9)] + [trace_pod("s", 1000)]
    policy = policy_named("fgd", workload)
    state = ClusterState.empty([node("a"), node("b")], rank=np.array([0, 1]))
    state.place(1, trace_pod("x", 1000), (0,))
    choice = choose(state, trace_pod("p", 1000), policy, np.random.default_rng(0))
    assert choice is not None
    assert (choice.node, choice.gpus) == (1, (1,))
    # its cached F follows the state: after placing, the next pod sees the new state
    state.place(1, trace_pod("p", 1000), (1,))
    choice = choose(state, trace_pod("r", 1000), policy, np.random.default_rng(0))
    assert choice is not None
    assert (choice.node, choice.gpus) == (1, (2,))
