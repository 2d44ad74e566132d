"""Replaying a cluster trace: arrival order, inflation, the allocation curve; the openb trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.replay.openb import load_nodes, load_pods
from gpuplex.replay.placement import POLICY_NAMES, allocation_curve, arrival_order, replay

OPENB = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "openb"


def gpu_pod(name: str, milli: int = 1000, num_gpu: int = 1, cpu: int = 1_000) -> TracePod:
    return TracePod(name, cpu, 1024, num_gpu, milli)


def two_gpu_node(cpu: int = 64_000) -> list[TraceNode]:
    return [TraceNode("n", cpu, 256 * 1024, 2, "T4")]


def test_policy_names() -> None:
    assert POLICY_NAMES == (
        "random",
        "first-fit",
        "best-fit",
        "gpu-packing",
        "dot-product",
        "fgd",
        "fgd-balanced",
    )


@pytest.mark.parametrize("policy", POLICY_NAMES)
def test_two_whole_gpu_pods_fill_a_two_gpu_node(policy: str) -> None:
    # each pod is half the capacity: records (arrived 50 %, allocated 50 %) and (100 %, 100 %);
    # a point takes the records rounding to it, else those within 1, else the previous point
    result = replay(two_gpu_node(), [gpu_pod("a"), gpu_pod("b")], policy, seed=7, inflate=1.0)
    assert result.capacity_milli == 2000
    assert result.arrived_percent == list(range(101))
    assert result.allocation_percent[:49] == [0.0] * 49
    assert result.allocation_percent[49:99] == [50.0] * 50
    assert result.allocation_percent[99:] == [100.0] * 2
    assert (result.failed_pods, result.total_pods) == (0, 2)
    assert result.at(100) == 100.0


def test_a_pod_that_fits_nowhere_fails_and_the_rest_go_on() -> None:
    pods = [gpu_pod("a", cpu=100_000), gpu_pod("b"), gpu_pod("c")]
    result = replay(two_gpu_node(), pods, "best-fit", seed=1, inflate=1.5)
    assert result.failed_pods >= 1
    assert result.at(150) == 100.0  # the two that fit fill the node
    assert len(result.arrived_percent) == 151


def test_a_share_leaves_the_rest_of_its_gpu() -> None:
    pods = [gpu_pod("a", milli=500), gpu_pod("b", milli=500), gpu_pod("c", milli=600)]
    result = replay(two_gpu_node(), pods, "best-fit", seed=3, inflate=0.8)
    assert result.at(80) == pytest.approx(80.0)  # 500 + 500 share one GPU, 600 on the other


def test_same_seed_same_curve_and_seeds_differ() -> None:
    nodes = [TraceNode(f"n{i}", 32_000, 65536, 4, "T4") for i in range(6)]
    pods = [gpu_pod(f"p{i}", milli=100 * (i % 10 + 1), cpu=2_000 * (i % 7)) for i in range(40)]
    one = replay(nodes, pods, "random", seed=42)
    assert replay(nodes, pods, "random", seed=42) == one
    assert any(replay(nodes, pods, "random", seed=s) != one for s in range(43, 48))


def test_allocation_curve_averages_the_records_rounding_to_each_point() -> None:
    arrived = np.array([10, 40, 60, 140, 1000])  # of 1000: 1, 4, 6, 14 and 100 %
    allocated = np.array([10, 30, 50, 100, 500])
    curve = allocation_curve(arrived, allocated, 1000, [0, 1, 4, 5, 6, 7, 10, 100])
    # 0: within 1 of 1 % -> 1.0; 5: none rounds to 5, within 1: 3.0 and 5.0 -> 4.0;
    # 7: 5.0 (from 6 %); 10: nothing near -> the previous point's 5.0
    assert curve == [1.0, 1.0, 3.0, 4.0, 5.0, 5.0, 5.0, 50.0]


def test_arrival_order_shuffles_then_inflates_to_the_target() -> None:
    pods = [gpu_pod(f"p{i}", milli=250) for i in range(8)]  # 2000 milli asked
    order = arrival_order(pods, 2000, inflate=1.3, rng=np.random.default_rng(0))
    assert sorted(p.name for p in order[:8]) == sorted(p.name for p in pods)
    assert sum(p.total_gpu_milli for p in order) == 2500  # 2600 is the target; 2750 would pass it
    assert all(p in pods for p in order[8:])


def test_arrival_order_trims_a_trace_asking_for_more() -> None:
    pods = [gpu_pod(f"p{i}") for i in range(10)]
    order = arrival_order(pods, 4000, inflate=1.0, rng=np.random.default_rng(0))
    assert len(order) == 4
    assert len({p.name for p in order}) == 4


def test_progress_is_reported_up_to_the_last_pod() -> None:
    calls: list[tuple[int, int]] = []
    replay(
        two_gpu_node(),
        [gpu_pod("a"), gpu_pod("b")],
        "random",
        seed=0,
        inflate=1.0,
        on_progress=lambda done, total: calls.append((done, total)),
    )
    assert calls[-1] == (2, 2)


def test_a_cluster_without_gpus_is_refused() -> None:
    with pytest.raises(ValueError, match="no GPUs"):
        replay([TraceNode("cpu", 8_000, 1024, 0, "")], [gpu_pod("a")], "random", seed=0)


@pytest.mark.skipif(not OPENB.is_dir(), reason=f"the openb trace is not at {OPENB}")
def test_openb_default_trace_loads_and_a_prefix_replays() -> None:
    nodes = load_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_pods(OPENB / "openb_pod_list_default.csv")
    assert (len(nodes), len(pods)) == (1213, 8152)
    assert sum(n.gpus for n in nodes) == 6212
    result = replay(nodes, pods, "best-fit", seed=42, inflate=0.3)  # demand trimmed to 30 %
    assert result.capacity_milli == 6_212_000
    assert result.failed_pods == 0  # a third full: everything fits
    assert result.at(30) == pytest.approx(30.0, abs=0.5)
