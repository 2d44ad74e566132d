"""gpuplex's policy, fgd-balanced: FGD first, its ties broken by GPU milli stranded by CPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from gpuplex.core.fragmentation.scores import (
    STRANDED_BOUND,
    balance_keys,
    cpu_per_gpu_milli,
    stranded_gpu_milli,
)
from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.core.trace.balanced import (
    BAND_POINTS,
    BalancedFgdScorer,
    model_pressure,
    workload_cpu_per_gpu_milli,
)
from gpuplex.core.trace.fgd import FEW_NODES, FgdScorer
from gpuplex.core.trace.registry import POLICY_NAMES


def node(name: str, cpu: int, gpus: int = 2) -> TraceNode:
    return TraceNode(name, cpu, 512 * 1024, gpus, "T4")


def trace_pod(name: str, cpu: int, milli: int = 1000, num: int = 1) -> TracePod:
    return TracePod(name, cpu, 1024, num, milli if num else 0)


def bound_pod(
    name: str, cpu: int, models: tuple[str, ...], milli: int = 1000, num: int = 1
) -> TracePod:
    return TracePod(name, cpu, 1024, num, milli, models)


def test_rho_is_the_gpu_pods_cpu_per_milli_gpu() -> None:
    workload = [
        trace_pod("a", 10_000),  # 1000 milli
        trace_pod("b", 2_000, 500),
        trace_pod("c", 8_000, 1000, 2),  # 2000 milli
        trace_pod("cpu-only", 50_000, 0, 0),  # not counted
    ]
    assert cpu_per_gpu_milli(workload) == pytest.approx(20_000 / 3_500)
    assert cpu_per_gpu_milli([trace_pod("cpu-only", 4_000, 0, 0)]) is None
    assert cpu_per_gpu_milli([trace_pod("no-cpu", 0, 1000)]) is None  # no ratio to keep
    assert cpu_per_gpu_milli([]) is None


def test_its_own_rho_counts_the_cpu_of_cpu_only_pods_too() -> None:
    workload = [
        trace_pod("a", 10_000),  # 1000 milli
        trace_pod("b", 2_000, 500),
        trace_pod("cpu-only", 50_000, 0, 0),  # its CPU comes from the same nodes
    ]
    assert workload_cpu_per_gpu_milli(workload) == pytest.approx(62_000 / 1_500)
    assert workload_cpu_per_gpu_milli([trace_pod("cpu-only", 4_000, 0, 0)]) is None
    assert workload_cpu_per_gpu_milli([trace_pod("no-cpu", 0, 1000)]) is None
    assert BalancedFgdScorer(workload).rho == pytest.approx(62_000 / 1_500)


def test_model_pressure_is_the_bound_pods_request_over_the_models_gpus() -> None:
    workload = [
        bound_pod("t", 1_000, ("T4",), num=2),  # 2 GPUs on T4
        bound_pod("v", 1_000, ("V100", "T4")),  # 1 GPU over V100 (6 GPUs) and T4 (2): 3/4, 1/4
        bound_pod("gone", 1_000, ("A100",)),  # a model the cluster lacks: asks nothing of it
        trace_pod("any", 1_000),  # any model: no pressure
    ]
    pressure = model_pressure(workload, {"T4": 2, "V100": 6, "G2": 8})
    assert pressure == pytest.approx({"T4": 2.25 / 2, "V100": 0.75 / 6, "G2": 0.0})


def test_a_pod_for_any_model_leaves_the_scarce_model_to_the_pods_bound_to_it() -> None:
    # nine of ten pods run only on T4, which has 2 GPUs; G2 has 8 nobody is bound to
    workload = [bound_pod(f"t{i}", 4_000, ("T4",)) for i in range(9)] + [trace_pod("a", 4_000)]
    state = ClusterState.empty(
        [TraceNode("t4", 64_000, 512 * 1024, 2, "T4"), TraceNode("g2", 64_000, 512 * 1024, 8, "G2")]
    )
    state.place(0, trace_pod("earlier", 4_000, 400), (0,))  # T4's GPU 0 has 600 left
    pod = trace_pod("any-model", 4_000, 600)
    both = np.arange(2, dtype=np.int64)
    # FGD likes filling T4's 600 exactly (64) a little more than opening a G2 GPU (62)
    assert FgdScorer(workload).score(state, pod, both).tolist() == [64, 62]
    rng = np.random.default_rng(0)
    fgd_choice = choose(state, pod, policy_named("fgd", workload), rng)
    assert fgd_choice is not None
    assert fgd_choice.node == 0
    # within one band of FGD's score the model the bound pods need least wins: G2
    balanced_choice = choose(state, pod, policy_named("fgd-balanced", workload), rng)
    assert balanced_choice is not None
    assert balanced_choice.node == 1
    # a pod bound to T4 itself still goes where FGD puts it
    bound = choose(
        state, bound_pod("t4-pod", 4_000, ("T4",), 600), policy_named("fgd-balanced", workload), rng
    )
    assert bound is not None
    assert bound.node == 0


def test_with_many_cpu_only_pods_a_cpu_light_pod_goes_where_cpu_is_short() -> None:
    # GPU pods ask 1 core per GPU, but CPU-only pods ask 16 cores each: rho 17 CPU per milli
    workload = [trace_pod(f"g{i}", 1_000) for i in range(4)]
    workload += [trace_pod(f"c{i}", 16_000, 0, 0) for i in range(4)]
    # a: 3 cores for 2 GPUs; b: 30 cores, first in the tie order. FGD ties (62, 62)
    state = ClusterState.empty([node("a", 3_000), node("b", 30_000)], rank=np.array([1, 0]))
    light = trace_pod("light", 1_000)
    both = np.arange(2, dtype=np.int64)
    assert FgdScorer(workload).score(state, light, both).tolist() == [62, 62]
    rng = np.random.default_rng(0)
    fgd_choice = choose(state, light, policy_named("fgd", workload), rng)
    assert fgd_choice is not None
    assert fgd_choice.node == 1
    # counted from the GPU pods alone (1 core per GPU) neither node strands anything and the
    # tie order sends it to b; with the CPU-only pods' CPU, a strands 941 milli less, b 236
    balanced_choice = choose(state, light, policy_named("fgd-balanced", workload), rng)
    assert balanced_choice is not None
    assert balanced_choice.node == 0


def test_cached_scores_are_those_of_a_fresh_scorer() -> None:
    workload = [trace_pod(f"w{i}", 4_000 * (i % 3), 250 * (1 + i % 4)) for i in range(12)]
    state = ClusterState.empty([node(f"n{i}", 24_000 + 8_000 * i, 1 + i % 4) for i in range(6)])
    kept = FgdScorer(workload)
    rng = np.random.default_rng(1)
    policy = policy_named("fgd", workload)
    for step in range(20):
        pod = workload[step % len(workload)]
        candidates = np.flatnonzero(state.feasible(pod))
        if candidates.size == 0:
            continue
        assert kept.scores(state, pod, candidates)[0].tolist() == (
            FgdScorer(workload).scores(state, pod, candidates)[0].tolist()
        )
        where = choose(state, pod, policy, rng)
        assert where is not None
        state.place(where.node, pod, where.gpus)


def test_stranded_is_free_gpu_milli_the_free_cpu_cannot_feed() -> None:
    cpu = np.array([20_000, 12_000, 0, 60_000], dtype=np.int64)
    free = np.array([2_000, 2_000, 500, 1_000], dtype=np.int64)
    # rho 10: 20k CPU feeds 2000 milli, 12k feeds 1200 (800 stranded), none feeds nothing
    assert stranded_gpu_milli(cpu, free, 10.0).tolist() == [0.0, 800.0, 500.0, 0.0]


def test_the_fgd_score_decides_first_then_the_least_stranded_growth() -> None:
    primary = np.array([50, 50, 51, 50], dtype=np.int64)
    growth = np.array([800.0, -500.0, 5_000.0, 0.4], dtype=np.float64)
    keys = balance_keys(primary, growth)
    assert int(np.argmax(keys)) == 2  # a better FGD score wins whatever it strands
    assert keys[1] > keys[3] > keys[0]  # then shrinking stranded capacity beats growing it
    huge = balance_keys(np.array([50, 49]), np.array([2.0 * STRANDED_BOUND, -2.0 * STRANDED_BOUND]))
    assert huge[0] > huge[1]  # clipped, so the growth never spills into the score


def test_a_cpu_only_pod_goes_where_cpu_is_to_spare() -> None:
    workload = [trace_pod(f"w{i}", 10_000) for i in range(9)]  # rho = 10 CPU per milli
    # a: 2 GPUs and just the CPU to feed them; b: CPU to spare. FGD sees no difference
    # (both still fit the typical pod after 8k CPU goes), so its tie goes to a (ranked first)
    state = ClusterState.empty([node("a", 20_000), node("b", 60_000)])
    cpu_pod = trace_pod("etl", 8_000, 0, 0)
    rng = np.random.default_rng(0)
    fgd_choice = choose(state, cpu_pod, policy_named("fgd", workload), rng)
    balanced_choice = choose(state, cpu_pod, policy_named("fgd-balanced", workload), rng)
    assert fgd_choice is not None
    assert fgd_choice.node == 0
    # on a it would strand 800 milli (12k CPU feeds 1200 of 2000); on b nothing
    assert balanced_choice is not None
    assert balanced_choice.node == 1


def test_a_cpu_light_pod_goes_where_cpu_is_short() -> None:
    workload = [trace_pod(f"w{i}", 1_000) for i in range(9)]  # rho = 1
    # a has 1.5k CPU for 2 GPUs (500 milli stranded); b plenty; b is first in the tie order
    state = ClusterState.empty([node("a", 1_500), node("b", 60_000)], rank=np.array([1, 0]))
    light = trace_pod("light", 500)
    rng = np.random.default_rng(0)
    fgd_choice = choose(state, light, policy_named("fgd", workload), rng)
    balanced_choice = choose(state, light, policy_named("fgd-balanced", workload), rng)
    assert fgd_choice is not None
    assert fgd_choice.node == 1
    # on a: stranded 500 -> 0 (1000 CPU feeds the last GPU); on b: 0 -> 0
    assert balanced_choice is not None
    assert (balanced_choice.node, balanced_choice.gpus) == (0, (0,))


def test_a_better_fgd_score_beats_the_balance() -> None:
    workload = [trace_pod(f"w{i}", 10_000) for i in range(9)]  # rho = 10
    # a: 10k CPU for 2 GPUs (1000 stranded). A CPU-light pod there would shrink that, but it
    # leaves a with 9k CPU, too little for the typical pod: its last GPU becomes fragment
    # (FGD 26 against 50 on b), so it goes to b
    state = ClusterState.empty([node("a", 10_000), node("b", 60_000)])
    policy = policy_named("fgd-balanced", workload)
    choice = choose(state, trace_pod("p", 1_000), policy, np.random.default_rng(0))
    assert choice is not None
    assert choice.node == 1


def test_without_gpu_pods_in_the_workload_it_is_fgd() -> None:
    workload = [trace_pod(f"c{i}", 4_000, 0, 0) for i in range(5)]
    state = ClusterState.empty([node("a", 20_000), node("b", 60_000, 4)])
    nodes = np.arange(2, dtype=np.int64)
    pod = trace_pod("p", 2_000, 300)
    balanced = BalancedFgdScorer(workload)
    assert balanced.rho is None
    assert (
        balanced.score(state, pod, nodes).tolist()
        == FgdScorer(workload).score(state, pod, nodes).tolist()
    )


def test_it_is_registered_as_the_last_policy() -> None:
    assert POLICY_NAMES[-1] == "fgd-balanced"
    assert policy_named("fgd-balanced", [trace_pod("a", 1_000)]).name == "fgd-balanced"


def keeping_whole_nodes(
    state: ClusterState,
    pod: TracePod,
    candidates: np.ndarray,
    workload: list[TracePod],
    pods_leave: bool,
) -> np.ndarray:
    """The nodes the policy may choose among: where pods leave and the workload has multi-GPU
    pods, the nodes already in use, when there are any; of those, the ones no rare multi-GPU pod
    needs, when there are any; of those, the ones with the fewest whole GPUs left after the pod
    (8 or more counting alike); else every candidate."""
    if not pods_leave or not any(p.num_gpu > 1 for p in workload):
        return candidates

    def whole_gpus(n: int) -> int:
        return sum(1 for left in state.gpu_left[n][: int(state.gpu_count[n])] if int(left) == 1000)

    def splits_an_idle_node(n: int) -> bool:
        return whole_gpus(n) == int(state.gpu_count[n]) and pod.num_gpu < state.gpu_count[n]

    def whole_left_after(n: int) -> int:
        taken = pod.num_gpu if pod.gpu_milli >= 1000 else 0
        return min(max(whole_gpus(n) - taken, 0), 8)

    kept = set(kept_for_rare_pods(state.nodes, workload))
    in_use = [n for n in candidates.tolist() if not splits_an_idle_node(n)] or candidates.tolist()
    free = [n for n in in_use if n not in kept] or in_use
    fewest = min(whole_left_after(n) for n in free)
    return np.array([n for n in free if whole_left_after(n) == fewest], dtype=np.int64)


def cpu_only_where_whole_nodes_are_kept(
    pod: TracePod, workload: list[TracePod], pods_leave: bool
) -> bool:
    """Whether fgd-balanced places `pod` without FGD's score: a CPU-only pod where pods leave,
    the workload has multi-GPU pods and CPU per GPU milli."""
    keeps_whole = pods_leave and any(p.num_gpu > 1 for p in workload)
    return keeps_whole and pod.num_gpu == 0 and workload_cpu_per_gpu_milli(workload) is not None


def off_the_rare_nodes(
    state: ClusterState, candidates: np.ndarray, workload: list[TracePod]
) -> list[int]:
    """The candidates no rare multi-GPU pod needs, or all of them when there are none."""
    kept = set(kept_for_rare_pods(state.nodes, workload))
    return [n for n in candidates.tolist() if n not in kept] or candidates.tolist()


def kept_for_rare_pods(nodes: tuple[TraceNode, ...], workload: list[TracePod]) -> list[int]:
    """The nodes that could take, empty, a multi-GPU pod of the workload that at most a tenth
    of the GPU nodes could take."""
    gpu_nodes = len([n for n in nodes if n.gpus])
    kept: set[int] = set()
    for big in (p for p in workload if p.num_gpu > 1):
        hosts = [
            i
            for i, n in enumerate(nodes)
            if n.gpus >= big.num_gpu
            and n.cpu_milli >= big.cpu_milli
            and n.memory_mib >= big.memory_mib
            and (not big.gpu_models or n.model in big.gpu_models)
        ]
        if len(hosts) * 10 <= gpu_nodes:
            kept.update(hosts)
    return sorted(kept)


def eight_gpu_cluster(used_on_second: int) -> ClusterState:
    state = ClusterState.empty([node("idle", 96_000, 8), node("busy", 96_000, 8)])
    for i in range(used_on_second):
        state.place(1, trace_pod(f"u{i}", 1_000), (i,))
    return state


MOSTLY_ONE_GPU = [trace_pod(f"one{i}", 4_000) for i in range(95)] + [
    trace_pod(f"eight{i}", 32_000, 1000, 8) for i in range(2)
]


SMALL_PODS = (trace_pod("one", 4_000), trace_pod("half", 4_000, 500), trace_pod("cpu", 4_000, 0, 0))


def chosen_nodes(state: ClusterState, pods_leave: bool) -> list[int | None]:
    policy = policy_named("fgd-balanced", MOSTLY_ONE_GPU, pods_leave=pods_leave)
    choices = [choose(state, pod, policy, np.random.default_rng(0)) for pod in SMALL_PODS]
    return [None if choice is None else choice.node for choice in choices]


def test_where_pods_leave_a_small_pod_goes_to_a_node_in_use_and_leaves_the_idle_node_whole() -> (
    None
):
    state = eight_gpu_cluster(used_on_second=3)
    # the GPU pods to the node in use; the CPU-only pod strands no GPU on either (both have CPU
    # for all their free GPUs), so it goes to the first
    assert chosen_nodes(state, pods_leave=True) == [1, 1, 0]
    policy = policy_named("fgd-balanced", MOSTLY_ONE_GPU, pods_leave=True)
    eight = choose(state, trace_pod("eight", 32_000, 1000, 8), policy, np.random.default_rng(0))
    assert eight is not None
    assert eight.node == 0


def test_where_pods_leave_a_gpu_pod_goes_where_the_fewest_whole_gpus_are_left() -> None:
    """Of two nodes in use, the one with 2 whole GPUs free takes the 1-GPU pod, and the one with
    6 keeps them for a multi-GPU pod; a share of a GPU takes no whole GPU, so it goes to the node
    with a GPU already shared, then the fewest whole GPUs."""
    state = ClusterState.empty([node("roomy", 96_000, 8), node("tight", 96_000, 8)])
    state.place(0, trace_pod("r0", 4_000), (0,))
    state.place(0, trace_pod("r1", 4_000), (1,))
    for i in range(6):
        state.place(1, trace_pod(f"t{i}", 4_000), (i,))
    policy = policy_named("fgd-balanced", MOSTLY_ONE_GPU, pods_leave=True)
    one = choose(state, trace_pod("one", 4_000), policy, np.random.default_rng(0))
    assert one is not None
    assert one.node == 1
    four = choose(state, trace_pod("four", 16_000, 1000, 4), policy, np.random.default_rng(0))
    assert four is not None
    assert four.node == 0  # only the roomy node has 4 whole GPUs
    # where pods stay the rule is off, and FGD's score alone decides
    assert BalancedFgdScorer(MOSTLY_ONE_GPU).keeps_whole_nodes is False


def test_where_pods_stay_fgd_may_open_the_idle_node() -> None:
    # the rule is off: FGD's score alone sends some of the small pods to the idle node
    assert 0 in chosen_nodes(eight_gpu_cluster(used_on_second=3), pods_leave=False)


def test_without_multi_gpu_pods_nothing_is_kept_whole() -> None:
    workload = [p for p in MOSTLY_ONE_GPU if p.num_gpu <= 1]
    scorer = BalancedFgdScorer(workload, pods_leave=True)
    assert not scorer.keeps_whole_nodes
    assert BalancedFgdScorer(MOSTLY_ONE_GPU, pods_leave=True).keeps_whole_nodes
    assert not BalancedFgdScorer(MOSTLY_ONE_GPU).keeps_whole_nodes


def test_where_pods_leave_a_cpu_only_pod_keeps_off_the_cpu_that_free_gpus_need() -> None:
    # the node in use has 4 free GPUs and just the CPU to feed them (4 cores per GPU in this
    # workload); a CPU-only pod there would leave a GPU no 1-GPU pod can use
    state = ClusterState.empty([node("busy", 48_000, 8), node("idle", 96_000, 8)])
    for i in range(4):
        state.place(0, trace_pod(f"u{i}", 8_000), (i,))
    policy = policy_named("fgd-balanced", MOSTLY_ONE_GPU, pods_leave=True)
    cpu_only = choose(state, trace_pod("cpu", 4_000, 0, 0), policy, np.random.default_rng(0))
    assert cpu_only is not None
    assert cpu_only.node == 1
    one = choose(state, trace_pod("one", 4_000), policy, np.random.default_rng(0))
    assert one is not None
    assert one.node == 0  # a GPU pod still goes to the node in use


def test_an_idle_node_is_opened_when_no_node_in_use_takes_the_pod() -> None:
    state = eight_gpu_cluster(used_on_second=8)  # the second node's GPUs are all taken
    # the GPU pods open the idle node; the CPU-only pod strands nothing anywhere: the first
    assert chosen_nodes(state, pods_leave=True) == [0, 0, 0]


def rare_host_cluster() -> ClusterState:
    """Ten 8-GPU nodes; only the last has the 128 cores an 8-GPU pod asking 120 needs."""
    return ClusterState.empty(
        [node(f"n{i}", 96_000, 8) for i in range(9)] + [node("big", 128_000, 8)]
    )


RARE_BIG = trace_pod("eight-120", 120_000, 1000, 8)
WITH_RARE_BIG = [*MOSTLY_ONE_GPU, RARE_BIG]


def test_where_pods_leave_small_pods_keep_off_the_nodes_a_rare_large_pod_needs() -> None:
    state = rare_host_cluster()
    assert kept_for_rare_pods(state.nodes, WITH_RARE_BIG) == [9]
    # the big node and another in use, the others idle; the other's CPU is short, so without
    # the rule the stranded-GPU key would send small pods to the big node
    state.place(0, trace_pod("early0", 80_000), (0,))
    state.place(9, trace_pod("early9", 4_000), (0,))
    policy = policy_named("fgd-balanced", WITH_RARE_BIG, pods_leave=True)
    rng = np.random.default_rng(0)
    for pod in SMALL_PODS[:2]:  # to the other node in use, not to the big node
        choice = choose(state, pod, policy, rng)
        assert choice is not None
        assert choice.node == 0, pod
    # the CPU-only pod neither: node 0's CPU is short for its free GPUs, an idle node's is not
    cpu_only = choose(state, SMALL_PODS[2], policy, rng)
    assert cpu_only is not None
    assert cpu_only.node not in (0, 9)
    eight = choose(state, trace_pod("eight-96", 96_000, 1000, 8), policy, rng)
    assert eight is not None
    assert eight.node not in (0, 9)  # an 8-GPU pod that fits elsewhere goes elsewhere
    state.remove(9, trace_pod("early9", 4_000), (0,))
    big = choose(state, RARE_BIG, policy, rng)
    assert big is not None
    assert big.node == 9  # the only node that takes it is still there for it
    state.remove(0, trace_pod("early0", 80_000), (0,))
    one = choose(state, trace_pod("one", 4_000), policy, rng)
    assert one is not None
    assert one.node != 9  # all idle: an idle node but the big one is opened


def test_a_node_kept_for_a_rare_pod_still_takes_small_pods_when_nothing_else_does() -> None:
    state = rare_host_cluster()
    for n in range(9):
        for g in range(8):
            state.place(n, trace_pod(f"f{n}-{g}", 4_000), (g,))
    choice = choose(
        state,
        trace_pod("one", 4_000),
        policy_named("fgd-balanced", WITH_RARE_BIG, pods_leave=True),
        np.random.default_rng(0),
    )
    assert choice is not None
    assert choice.node == 9


def test_where_pods_stay_nothing_is_kept_for_rare_pods() -> None:
    scorer = BalancedFgdScorer(WITH_RARE_BIG)
    assert not scorer.reserved_nodes(rare_host_cluster()).any()
    assert BalancedFgdScorer(WITH_RARE_BIG, pods_leave=True).reserved_nodes(
        rare_host_cluster()
    ).tolist() == [False] * 9 + [True]


def place_by_fgd(
    state: ClusterState, placed: list[TracePod], workload: list[TracePod], rng: np.random.Generator
) -> None:
    """Some cluster state: `placed` put where plain FGD puts them, those that fit."""
    fgd = policy_named("fgd", workload)
    for earlier in placed:
        where = choose(state, earlier, fgd, rng)
        if where is not None:
            state.place(where.node, earlier, where.gpus)


pods = st.builds(
    trace_pod,
    name=st.just("p"),
    cpu=st.integers(0, 40_000),
    milli=st.sampled_from([100, 250, 460, 500, 810, 1000]),
    num=st.sampled_from([0, 1, 1, 1, 2, 4]),
)


@settings(max_examples=60, deadline=None)
@given(
    cpus=st.lists(st.integers(0, 128_000), min_size=1, max_size=5),
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=5, max_size=5),
    placed=st.lists(pods, max_size=12),
    workload=st.lists(pods, min_size=1, max_size=8),
    pod=pods,
    pods_leave=st.booleans(),
)
@example(  # GPU pods that ask no CPU: no ratio to keep (once divided 0 by 0)
    cpus=[0],
    gpus=[1] * 5,
    placed=[],
    workload=[trace_pod("w", 0)],
    pod=trace_pod("p", 0),
    pods_leave=False,
)
def test_it_only_ever_chooses_among_fgds_best_nodes(
    cpus: list[int],
    gpus: list[int],
    placed: list[TracePod],
    workload: list[TracePod],
    pod: TracePod,
    pods_leave: bool,
) -> None:
    state = ClusterState.empty([node(f"n{i}", cpu, gpus[i]) for i, cpu in enumerate(cpus)])
    rng = np.random.default_rng(0)
    place_by_fgd(state, placed, workload, rng)  # some cluster state
    choice = choose(state, pod, policy_named("fgd-balanced", workload, pods_leave=pods_leave), rng)
    candidates = np.flatnonzero(state.feasible(pod))
    if candidates.size == 0:
        assert choice is None
        return
    assert choice is not None
    if cpu_only_where_whole_nodes_are_kept(pod, workload, pods_leave):
        assert choice.node in off_the_rare_nodes(state, candidates, workload)
        return
    allowed = keeping_whole_nodes(state, pod, candidates, workload, pods_leave)
    fgd_scores = FgdScorer(workload).score(state, pod, allowed)
    assert choice.node in allowed.tolist()
    assert fgd_scores[allowed.tolist().index(choice.node)] == fgd_scores.max()


@settings(max_examples=60, deadline=None)
@given(
    cpus=st.lists(st.integers(0, 128_000), min_size=2, max_size=5),
    placed=st.lists(pods, max_size=8),
    workload=st.lists(pods, min_size=1, max_size=6),
    bound=st.lists(st.sampled_from([("T4",), ("G2",), ("T4", "G2")]), min_size=1, max_size=4),
    pod=pods,
    pods_leave=st.booleans(),
)
def test_with_bound_pods_it_chooses_within_the_band_of_fgds_best(
    cpus: list[int],
    placed: list[TracePod],
    workload: list[TracePod],
    bound: list[tuple[str, ...]],
    pod: TracePod,
    pods_leave: bool,
) -> None:
    models = ["T4", "G2"]
    state = ClusterState.empty(
        [
            TraceNode(f"n{i}", cpu, 512 * 1024, 2 + 2 * i, models[i % 2])
            for i, cpu in enumerate(cpus)
        ]
    )
    workload = workload + [bound_pod(f"b{i}", 4_000, m) for i, m in enumerate(bound)]
    rng = np.random.default_rng(0)
    place_by_fgd(state, placed, workload, rng)
    choice = choose(state, pod, policy_named("fgd-balanced", workload, pods_leave=pods_leave), rng)
    candidates = np.flatnonzero(state.feasible(pod))
    if candidates.size == 0:
        assert choice is None
        return
    assert choice is not None
    if cpu_only_where_whole_nodes_are_kept(pod, workload, pods_leave):
        assert choice.node in off_the_rare_nodes(state, candidates, workload)
        return
    allowed = keeping_whole_nodes(state, pod, candidates, workload, pods_leave)
    fgd_scores = FgdScorer(workload).score(state, pod, allowed)
    assert choice.node in allowed.tolist()
    chosen = int(fgd_scores[allowed.tolist().index(choice.node)])
    assert chosen // BAND_POINTS == int(fgd_scores.max()) // BAND_POINTS


@settings(max_examples=40, deadline=None)
@given(
    gpus=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=FEW_NODES + 1, max_size=FEW_NODES + 8),
    placed=st.lists(pods, max_size=30),
    workload=st.lists(pods, min_size=1, max_size=8),
    pod=pods,
    pods_leave=st.booleans(),
)
def test_keys_on_a_few_nodes_are_the_keys_on_many(
    gpus: list[int],
    placed: list[TracePod],
    workload: list[TracePod],
    pod: TracePod,
    pods_leave: bool,
) -> None:
    state = ClusterState.empty([node(f"n{i}", 64_000, count) for i, count in enumerate(gpus)])
    rng = np.random.default_rng(0)
    place_by_fgd(state, placed, workload, rng)
    scorer = BalancedFgdScorer(  # an 8-GPU pod: rare where few nodes have 8 GPUs
        [*workload, trace_pod("multi", 8_000, 1000, 2), trace_pod("eight", 8_000, 1000, 8)],
        pods_leave=pods_leave,
    )
    nodes = np.arange(len(gpus), dtype=np.int64)
    points = FgdScorer(workload).score(state, pod, nodes)  # FGD's whole points
    many = scorer.keys(state, pod, nodes, points)
    few = np.concatenate(
        [scorer.keys(state, pod, nodes[i : i + 1], points[i : i + 1]) for i in range(nodes.size)]
    )
    assert many.tolist() == few.tolist()
