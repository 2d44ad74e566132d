"""The jobs replay's event loop on a hand-made trace: arrivals, departures, a reclaim that
preempts and requeues, FIFO against the queue rules; the tenants file; Jain's index."""

from __future__ import annotations

import numpy as np
import pytest

from gpuplex.core.queues.tree import PreemptionRules, QueueNode, QueueTree
from gpuplex.core.spec.queues import WithinQueue
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.core.trace import TraceNode, TracePod
from gpuplex.errors import SpecProblem
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.jobs_report import jain_index, tenant_rows, timeline
from gpuplex.replay.openb import TimedPod
from gpuplex.replay.tenants_file import Tenants, parse_tenants_file

NODES = [
    TraceNode("n0", 64_000, 256 * 1024, 2, "V100"),
    TraceNode("n1", 64_000, 256 * 1024, 2, "V100"),
]


def pod(name: str, at: float, runtime: float | None, gpus: int = 1) -> TimedPod:
    return TimedPod(TracePod(name, 1_000, 1_024, gpus, 1000), at, runtime)


def two_tenants(min_runtime_s: float = 0.0) -> QueueTree:
    """a is guaranteed 3 of the 4 GPUs, b nothing (it borrows)."""
    rules = PreemptionRules(min_runtime_s=min_runtime_s, within_queue=WithinQueue.NEVER)
    a = QueueNode("a", "tenant", {GPUS: 3.0}, preemption=rules)
    b = QueueNode("b", "tenant", {}, preemption=rules)
    cap = {GPUS: 4.0}
    return QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=(a, b)), cap)


def test_pods_start_when_others_leave_and_delays_count_the_wait() -> None:
    pods = [pod("p0", 0, 10, gpus=2), pod("p1", 0, 5, gpus=2), pod("p2", 1, 4, gpus=2)]
    result = replay_jobs(NODES, pods, ["a", "a", "a"], tree=None, policy="best-fit", seed=1)
    records = {r.name: r for r in result.records}
    assert records["p0"].start_s == 0
    assert records["p0"].end_s == 10
    assert records["p1"].end_s == 5
    assert records["p2"].start_s == 5
    assert records["p2"].delay_s == 4
    assert records["p2"].end_s == 9


def test_a_tenant_inside_its_guarantee_reclaims_borrowed_gpus() -> None:
    # b borrows all 4 GPUs; a arrives inside its guarantee and takes 2 of them back
    pods = [pod(f"b{i}", 0, 100) for i in range(4)] + [pod("a0", 10, 5, gpus=2)]
    owners = ["b"] * 4 + ["a"]
    result = replay_jobs(NODES, pods, owners, tree=two_tenants(), policy="best-fit", seed=1)
    records = {r.name: r for r in result.records}
    assert records["a0"].start_s == 10  # grace period 0: the victims leave at once
    preempted = [r for r in result.records if r.preemptions]
    assert len(preempted) == 2
    assert all(r.tenant == "b" for r in preempted)
    for victim in preempted:  # back in b's queue with their first arrival time, rerun whole
        assert victim.start_s == 0
        assert victim.end_s == 15 + 100


def test_fifo_keeps_arrival_order_where_the_queues_let_the_guarantee_pass() -> None:
    pods = [pod(f"b{i}", 0, 50) for i in range(4)] + [pod("b4", 1, 50), pod("a0", 2, 5)]
    owners = ["b"] * 5 + ["a"]
    fifo = replay_jobs(NODES, pods, owners, tree=None, policy="best-fit", seed=1)
    queues = replay_jobs(NODES, pods, owners, tree=two_tenants(), policy="best-fit", seed=1)
    a_fifo = next(r for r in fifo.records if r.name == "a0")
    a_queues = next(r for r in queues.records if r.name == "a0")
    assert a_fifo.start_s == 50  # behind b4, which waits for the first b pods to leave
    assert a_queues.start_s == 2
    assert sum(r.preemptions for r in fifo.records) == 0
    assert sum(r.preemptions for r in queues.records) == 1


def test_a_pod_no_node_can_take_stays_queued_and_does_not_run() -> None:
    pods = [pod("big", 0, 10, gpus=3), pod("small", 1, 10)]  # 3 GPUs: no node has 3
    result = replay_jobs(NODES, pods, ["a", "a"], tree=two_tenants(), policy="best-fit", seed=1)
    records = {r.name: r for r in result.records}
    assert records["big"].start_s is None
    assert result.no_room > 0
    assert records["small"].start_s == 1


def test_a_pod_no_node_can_take_holds_no_room_from_pods_that_fit() -> None:
    """Before, the 2-GPU pod the rules admitted took both free GPUs (one on each node) from the
    round it could not be placed in, and the 1-GPU pod after it waited for nothing."""
    wide = [TimedPod(TracePod(f"b{i}", 40_000, 1_024, 1, 1000), 0, 100) for i in range(2)]
    pods = [*wide, pod("big", 1, 10, gpus=2), pod("small", 1, 10)]  # one wide pod per node
    owners = ["b", "b", "a", "b"]
    result = replay_jobs(NODES, pods, owners, tree=two_tenants(), policy="gpu-packing", seed=1)
    records = {r.name: r for r in result.records}
    assert {records["b0"].start_s, records["b1"].start_s} == {0}
    assert records["big"].start_s == 100  # once b0 and b1 leave
    assert records["small"].start_s == 1
    fifo = replay_jobs(NODES, pods, owners, tree=None, policy="gpu-packing", seed=1)
    assert {r.name: r for r in fifo.records}["small"].start_s == 100  # FIFO: behind big


def test_no_pod_is_preempted_for_a_pod_its_victims_would_not_make_room_for() -> None:
    """b borrows all four GPUs, two pods on each node; the two youngest are on different nodes.
    a's 2-GPU pod (inside its guarantee) would reclaim them, but one free GPU on each node is no
    room for it: they run on, and it starts once a node frees up."""

    def wide(name: str, at: float, runtime: float) -> TimedPod:  # two fill a node's CPU
        return TimedPod(TracePod(name, 30_000, 1_024, 1, 1000), at, runtime)

    pods = [wide("b0", 0, 5), wide("b1", 0, 100), wide("b2", 0, 5), wide("b3", 0, 100)]
    pods += [wide("b4", 6, 100), wide("b5", 6, 100), pod("big", 7, 10, gpus=2)]
    owners = ["b"] * 6 + ["a"]
    result = replay_jobs(NODES, pods, owners, tree=two_tenants(), policy="best-fit", seed=1)
    records = {r.name: r for r in result.records}
    assert records["b4"].start_s == 6
    assert records["b5"].start_s == 6
    assert sum(r.preemptions for r in result.records) == 0
    assert records["big"].start_s == 106  # when b4 and b5 leave (b1 and b3 leave one GPU on each)


def test_report_shares_and_jain() -> None:
    pods = [pod(f"b{i}", 0, 100) for i in range(4)] + [pod("a0", 10, 50)]
    tree = two_tenants(min_runtime_s=1000)  # b's pods are too young to preempt
    result = replay_jobs(NODES, pods, ["b"] * 4 + ["a"], tree=tree, policy="best-fit", seed=1)
    line = timeline(result, tree)
    rows = {r.tenant: r for r in tenant_rows(result, line)}
    assert rows["a"].delay_p50_s == 90
    assert rows["b"].preemptions == 0
    at = next(i for i, t in enumerate(line.times_s) if t > 10)  # a0 waits, b holds all 4
    assert line.times_s[-1] < 100  # sampled while a0 waits, not after it started
    assert line.allocated["b"][at] == 4
    assert line.fair["a"][at] == 1
    assert line.fair["b"][at] == 3
    assert line.jain[at] < 1
    assert line.contended[at]
    assert line.mean_jain_contended == pytest.approx(line.jain[at])  # a0 waits all along
    assert jain_index([1, 1, 1]) == 1
    assert jain_index([1, 0]) == pytest.approx(0.5)


TENANTS = {
    "queues": {
        "organisations": [
            {"name": "org", "teams": [{"name": "team", "tenants": [{"name": "a"}, {"name": "b"}]}]}
        ]
    },
    "assign": [
        {"tenant": "a", "pattern": "gpu-*"},
        {"tenant": "a", "share": 1},
        {"tenant": "b", "share": 3},
    ],
}


def test_tenants_file_assigns_by_pattern_then_by_share() -> None:
    tenants = parse_tenants_file(TENANTS)
    assert isinstance(tenants, Tenants)
    names = ["gpu-1", "gpu-2"] + [f"p{i}" for i in range(2000)]
    owners = tenants.assign(names, np.random.default_rng(3))
    assert owners[:2] == ["a", "a"]
    assert 0.7 < owners[2:].count("b") / 2000 < 0.8
    assert tenants.tree({GPUS: 8.0}).tenant_names() == ["a", "b"]


def test_tenants_file_problems_name_their_field() -> None:
    bad = {
        **TENANTS,
        "assign": [{"tenant": "zed", "share": 1}, {"tenant": "a", "pattern": "x", "share": 1}],
    }
    problems = parse_tenants_file(bad)
    assert isinstance(problems, list)
    paths = {p.path for p in problems if isinstance(p, SpecProblem)}
    assert ("assign", 0, "tenant") in paths
    assert ("assign", 1) in paths
    problems = parse_tenants_file({**TENANTS, "assign": [{"tenant": "a", "share": -1}]})
    assert isinstance(problems, list)
    assert problems[0].path == ("assign", 0, "share")
