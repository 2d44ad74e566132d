"""`replay_stream` places each pod where gpuplex's scheduler extender would: a policy that learns
from the workload (`fgd`, `fgd-balanced`) learns what the extender learns, the GPU pods the
cluster holds when a pod comes, and not the whole stream. The extender's side here is its own
decision function (`gpuplex.kube.extender.place`) on Node objects and pod asks as the API serves
them; against a real kube-scheduler: tests/kube_real/test_scheduler_extender.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuplex.core.trace import ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.kube.apply import parse_quantity
from gpuplex.kube.extender import Held, PodAsk, place
from gpuplex.replay.stream import StreamEvent, replay_stream

#: (cores, GiB, GPUs) per node: openb's commonest 8- and 2-GPU shapes and a small 4-GPU one
SHAPES = [(96, 384, 8)] * 3 + [(104, 512, 2)] * 3 + [(32, 128, 4)] * 2
NODES = [TraceNode(f"n{i}", c * 1000, g * 1024, gpus, "") for i, (c, g, gpus) in enumerate(SHAPES)]


def _stream(seed: int, pods: int = 120) -> list[StreamEvent]:
    """Pods of varied CPU and GPU counts, each leaving 1 to 30 arrivals later."""
    rng = np.random.default_rng(seed)
    timed: list[tuple[int, int, StreamEvent]] = []
    for index in range(pods):
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.55, 0.15, 0.15, 0.15]))
        cores = int(rng.choice([2, 4, 8, 16, 32, 64]))
        pod = TracePod(f"p{index}", cores * 1000, int(rng.integers(4, 200)) * 1024, gpus, 1000)
        timed.append((index, 1, StreamEvent(index, pod, True)))
        timed.append((index + int(rng.integers(1, 31)), 0, StreamEvent(index, pod, False)))
    timed.sort(key=lambda e: (e[0], e[1], e[2].index))
    return [event for _, _, event in timed]


def _node_object(node: TraceNode) -> dict[str, Any]:
    allocatable = {
        "cpu": f"{node.cpu_milli}m",
        "memory": f"{node.memory_mib}Mi",
        "nvidia.com/gpu": str(node.gpus),
        "pods": "110",
    }
    return {
        "metadata": {"name": node.name},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def _ask(pod: TracePod) -> PodAsk:
    return PodAsk(cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpus=pod.num_gpu)


def _through_the_extender(
    events: list[StreamEvent], policy: str, elsewhere: tuple[Held, ...] = ()
) -> dict[int, str | None]:
    """Each arriving pod's node as the extender chooses it, given the pods placed before it (its
    snapshot: their bindings and every GPU pod the cluster holds, the arriving one included, and
    `elsewhere`: pods bound to nodes that are not candidates)."""
    candidates = [_node_object(n) for n in NODES]
    held: dict[int, Held] = {}
    chosen: dict[int, str | None] = {}
    for event in events:
        if not event.arrives:
            held.pop(event.index, None)
            continue
        ask = _ask(event.pod)
        workload = [h.ask for h in elsewhere] + [h.ask for h in held.values()] + [ask]
        holding = [*elsewhere, *held.values()]
        node = place(ask, candidates, holding, policy, workload, parse_quantity).node
        chosen[event.index] = node
        if node is not None:
            held[event.index] = Held(node, ask)
    return chosen


def _learning_from_the_whole_stream(events: list[StreamEvent], policy: str) -> dict[int, str]:
    """Where the pods go when the policy learns from every pod of the stream at once (what the
    simulator did before it learned as the extender does)."""
    state = ClusterState.empty(sorted(NODES, key=lambda n: n.name))
    learned = policy_named(policy, [e.pod for e in events if e.arrives], pods_leave=True)
    where: dict[int, tuple[int, tuple[int, ...]]] = {}
    placed: dict[int, str] = {}
    rng = np.random.default_rng(0)
    for event in events:
        if event.arrives:
            choice = choose(state, event.pod, learned, rng)
            if choice is not None:
                state.place(choice.node, event.pod, choice.gpus)
                where[event.index] = (choice.node, choice.gpus)
                placed[event.index] = state.nodes[choice.node].name
        elif event.index in where:
            node, gpus = where.pop(event.index)
            state.remove(node, event.pod, gpus)
    return placed


@pytest.mark.parametrize("policy", ["fgd", "fgd-balanced", "best-fit"])
@pytest.mark.parametrize("seed", [1, 2])
def test_each_pod_goes_where_the_extender_sends_it(policy: str, seed: int) -> None:
    events = _stream(seed)
    simulated = replay_stream(NODES, events, policy)
    extender = _through_the_extender(events, policy)
    assert simulated.placed == {i: n for i, n in extender.items() if n is not None}
    assert simulated.failed == sum(1 for n in extender.values() if n is None)
    assert simulated.failed > 0  # the stream fills the cluster: room is what placement decides


def test_the_stream_tells_learning_from_the_holdings_apart_from_the_whole_stream() -> None:
    """What makes the test above able to fail: on these streams, a policy that learned from the
    whole stream sends pods elsewhere."""
    for seed in (1, 2):
        events = _stream(seed)
        extender = _through_the_extender(events, "fgd-balanced")
        whole = _learning_from_the_whole_stream(events, "fgd-balanced")
        assert whole != {i: n for i, n in extender.items() if n is not None}, seed


def test_gpu_pods_on_other_nodes_are_learned_from_as_the_extender_learns_from_them() -> None:
    """The extender lists every GPU pod of the cluster, those on nodes it is not asked about
    included; `elsewhere` gives the simulator the same, and they change where pods go."""
    events = _stream(1)
    others = [TracePod(f"o{i}", 8000, 8192, 4, 1000) for i in range(30)]  # a 4-GPU fleet
    elsewhere = tuple(Held("another-node", _ask(pod)) for pod in others)
    extender = _through_the_extender(events, "fgd-balanced", elsewhere)
    simulated = replay_stream(NODES, events, "fgd-balanced", elsewhere=others)
    assert simulated.placed == {i: n for i, n in extender.items() if n is not None}
    assert simulated.placed != replay_stream(NODES, events, "fgd-balanced").placed
