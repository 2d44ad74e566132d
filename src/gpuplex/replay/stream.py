"""A stream of pods that arrive and leave, replayed one event at a time: the simulator's side of
the comparison with kube-scheduler (tests/kube_real/test_scheduler_extender.py), where the same
stream goes through a real scheduler.

Pods arrive in order; each is placed by the policy or fails (and is not retried, so that both
sides see the same cluster after every event, with no retry timing in between); a placed pod
leaves at its departure event. After every event the GPUs allocated are recorded; the stream's
*allocation* is their mean, as % of the cluster's GPUs.

A policy that learns from the workload (`fgd`, `fgd-balanced`) learns here what the extender
learns (`gpuplex.kube.extender`): the GPU pods the cluster holds when a pod comes, the placed ones
and the arriving one, not the whole stream that no scheduler can know in advance. So the
simulator places each pod where the extender would.

`openb_stream` draws the pods from a trace's whole-GPU pods (their CPU, memory and GPU count) with
a seed, a GPU count first by `size_weights` and then a pod of that count, and gives each a stay
proportional to its trace runtime (measured in arrivals, capped). openb's own mix is 98 % 1-GPU
pods, on which every policy allocates within a point of the others; the weights bring in the
multi-GPU pods that make packing matter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.core.trace import (
    MILLI,
    ClusterState,
    Policy,
    TraceNode,
    TracePod,
    choose,
    policy_named,
)
from gpuplex.core.trace.registry import WORKLOAD_POLICIES
from gpuplex.replay.openb import TimedPod

#: GPU counts and how often a drawn pod asks for each
DEFAULT_SIZES: tuple[tuple[int, float], ...] = ((1, 0.6), (2, 0.1), (4, 0.1), (8, 0.2))


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """Pod `index` of the stream arrives (`arrives`) or leaves."""

    index: int
    pod: TracePod
    arrives: bool


@dataclass(frozen=True, slots=True)
class StreamResult:
    policy: str
    #: the node each placed pod went to, by stream index; failed pods are absent
    placed: dict[int, str]
    failed: int
    #: GPUs allocated after each event
    allocated_gpus: list[int]
    capacity_gpus: int

    @property
    def allocation_percent(self) -> float:
        """The mean allocation over the stream's events, % of the cluster's GPUs."""
        if not self.allocated_gpus or self.capacity_gpus <= 0:
            return 0.0
        return 100.0 * float(np.mean(self.allocated_gpus)) / self.capacity_gpus


def openb_stream(
    timed: Sequence[TimedPod],
    *,
    pods: int,
    seed: int,
    spacing: int,
    sizes: Sequence[tuple[int, float]] = DEFAULT_SIZES,
) -> list[StreamEvent]:
    """`pods` arrivals drawn from the trace's whole-GPU pods, each leaving after about its
    runtime over the trace's median runtime, times `spacing` arrivals (at most 10 x `spacing`)."""
    by_count: dict[int, list[TimedPod]] = {}
    for item in sorted(timed, key=lambda t: t.pod.name):
        pod = item.pod
        if pod.gpu_milli == MILLI and pod.num_gpu >= 1 and item.runtime_s:
            by_count.setdefault(pod.num_gpu, []).append(item)
    counts = [count for count, _ in sizes if count in by_count]
    if not counts:
        raise ValueError("the trace has no whole-GPU pods of the sizes asked for")
    weights = np.array([w for count, w in sizes if count in by_count], dtype=np.float64)
    rng = np.random.default_rng(seed)
    median = float(np.median([t.runtime_s for group in by_count.values() for t in group]))
    events: list[tuple[int, int, StreamEvent]] = []
    for index in range(pods):
        count = counts[int(rng.choice(len(counts), p=weights / weights.sum()))]
        group = by_count[count]
        drawn = group[int(rng.integers(len(group)))]
        pod = TracePod(
            f"stream-{index:04d}", drawn.pod.cpu_milli, drawn.pod.memory_mib, count, MILLI
        )
        stay = max(1, round((drawn.runtime_s or median) / median * spacing))
        events.append((index, 1, StreamEvent(index, pod, True)))
        events.append((index + min(stay, 10 * spacing), 0, StreamEvent(index, pod, False)))
    events.sort(key=lambda e: (e[0], e[1], e[2].index))  # at one step, departures first
    return [event for _, _, event in events]


def replay_stream(
    nodes: Sequence[TraceNode],
    events: Sequence[StreamEvent],
    policy: str,
    *,
    elsewhere: Sequence[TracePod] = (),
) -> StreamResult:
    """The stream placed by `policy`; node ties go to the first node by name. `elsewhere`: GPU
    pods the cluster holds on other nodes all along, which `fgd` and `fgd-balanced` learn from
    too, as the extender does (it lists every GPU pod of the cluster)."""
    state = ClusterState.empty(sorted(nodes, key=lambda n: n.name))
    # fgd and fgd-balanced are built per pod; any other policy once (an unknown name raises here)
    fixed = None if policy in WORKLOAD_POLICIES else policy_named(policy)
    rng = np.random.default_rng(0)
    where: dict[int, tuple[int, tuple[int, ...]]] = {}
    placed: dict[int, str] = {}
    held: dict[int, TracePod] = {}  # the pods the cluster holds, by stream index
    allocated: list[int] = []
    failed = 0
    for event in events:
        if event.arrives:
            chosen = fixed or _learned(policy, [*elsewhere, *held.values(), event.pod])
            choice = choose(state, event.pod, chosen, rng)
            if choice is None:
                failed += 1
            else:
                state.place(choice.node, event.pod, choice.gpus)
                held[event.index] = event.pod
                where[event.index] = (choice.node, choice.gpus)
                placed[event.index] = state.nodes[choice.node].name
        elif event.index in where:
            node, gpus = where.pop(event.index)
            del held[event.index]
            state.remove(node, event.pod, gpus)
        allocated.append(state.allocated_milli // MILLI)
    return StreamResult(policy, placed, failed, allocated, state.capacity_milli // MILLI)


def _learned(policy: str, holding: list[TracePod]) -> Policy:
    """The policy as the extender builds it for one pod: from what the cluster holds now, the
    arriving pod included."""
    return policy_named(policy, holding, pods_leave=True)
