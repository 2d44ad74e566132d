"""The scheduler extender's decisions: which node a GPU pod goes to, by the same placement policy
as `gpuplex simulate` (`gpuplex.core.trace`). Pure: Kubernetes objects (as the API serves them) in,
a node name out; `gpuplex.kube.extender_view` fetches the objects and
`gpuplex.server.scheduler_extender` answers kube-scheduler.

kube-scheduler calls the extender after its own filters with the nodes that passed them (the
candidates). The extender rebuilds what each candidate holds from the pods bound to it, as
kube-scheduler counts it (requests, not use): CPU and memory of every non-terminal pod, and
whole GPUs (`nvidia.com/gpu`). The pod's choice is the policy's over those candidates, ties to the
first by name (the simulator's tie-break with nodes in name order), so a stream of pods replays
here as it does in the simulator.

- A pod asking whole GPUs is placed by the policy (best-fit, fgd, fgd-balanced, ...). FGD and
  fgd-balanced score against the shapes of the GPU pods the cluster holds now, bound and pending:
  the work actually waiting, not a trace.
- A pod asking a MIG profile (`nvidia.com/mig-<profile>`) and no whole GPU goes best-fit on that
  profile: the candidate with the fewest such slices left once it is placed, so slices are used
  up node by node and whole GPUs' worth of slices stay together.
- A pod asking neither is not the extender's (kube-scheduler sends only pods asking a managed
  resource); it keeps every candidate.

A pod whose request cannot be read (a quantity the API would never have accepted) keeps every
candidate too: the extender never blocks what kube-scheduler found room for.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

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
from gpuplex.kube.kueue_flavors import GPU_PRODUCT_LABEL

#: the whole-GPU resource the NVIDIA device plugin advertises
GPU_RESOURCE = "nvidia.com/gpu"
#: a MIG slice's resource is this prefix + its profile (mixed strategy): nvidia.com/mig-1g.10gb
MIG_PREFIX = "nvidia.com/mig-"
#: the policies the extender may run: every deterministic one (`random` draws)
EXTENDER_POLICIES = ("best-fit", "fgd", "fgd-balanced", "first-fit", "gpu-packing", "dot-product")
#: kube-scheduler's range for an extender's priorities (extenderv1.MaxExtenderPriority)
MAX_EXTENDER_PRIORITY = 10
MIB = 1 << 20

Quantity = Callable[[str], Decimal]
Manifest = dict[str, Any]


class UnreadableRequest(ValueError):
    """A pod's or node's resource quantity the extender cannot read."""


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What a pod asks, as kube-scheduler counts it."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    mig: Mapping[str, int] = field(default_factory=dict)

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or any(self.mig.values())

    def trace_pod(self, name: str) -> TracePod:
        return TracePod(
            name, self.cpu_milli, self.memory_mib, self.gpus, MILLI if self.gpus > 0 else 0
        )


@dataclass(frozen=True, slots=True)
class NodeChoice:
    """The extender's answer for one pod: the node it goes to (None: keep every candidate) and,
    for the others, why not."""

    node: str | None
    why: str


def pod_ask(pod: Manifest, quantity: Quantity) -> PodAsk:
    """The pod's effective request, as kube-scheduler computes it: the larger of its containers'
    sum (restartable init containers, sidecars, included) and its largest init container, plus
    the pod's overhead. A container's request defaults to its limit (extended resources such as
    GPUs are given as limits only)."""
    spec = pod.get("spec") or {}
    running: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        _add(running, _requests(container, quantity))
    most_init: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or []:
        asked = _requests(container, quantity)
        if container.get("restartPolicy") == "Always":  # a sidecar runs beside the containers
            _add(running, asked)
            continue
        for resource, amount in asked.items():
            most_init[resource] = max(most_init.get(resource, Decimal(0)), amount)
    total = {r: max(running.get(r, Decimal(0)), most_init.get(r, Decimal(0))) for r in running}
    for resource, amount in most_init.items():
        total.setdefault(resource, amount)
    _add(total, _amounts(spec.get("overhead") or {}, quantity))
    return PodAsk(
        cpu_milli=math.ceil(total.get("cpu", Decimal(0)) * 1000),
        memory_mib=math.ceil(total.get("memory", Decimal(0)) / MIB),
        gpus=int(total.get(GPU_RESOURCE, Decimal(0))),
        mig={
            r.removeprefix(MIG_PREFIX): int(n)
            for r, n in sorted(total.items())
            if r.startswith(MIG_PREFIX) and n > 0
        },
    )


def _requests(container: Manifest, quantity: Quantity) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    asked = _amounts(resources.get("limits") or {}, quantity)
    asked.update(_amounts(resources.get("requests") or {}, quantity))
    return asked


def _amounts(values: Mapping[str, Any], quantity: Quantity) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for resource, text in values.items():
        try:
            out[resource] = quantity(str(text))
        except (ValueError, ArithmeticError) as error:
            raise UnreadableRequest(f"{resource}: {text!r} is not a quantity ({error})") from None
    return out


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for resource, amount in more.items():
        into[resource] = into.get(resource, Decimal(0)) + amount


def node_capacity(node: Manifest, quantity: Quantity) -> tuple[TraceNode, dict[str, int]]:
    """The node as the simulator sees it (allocatable CPU, memory, whole GPUs; its GPU model from
    GPU feature discovery's product label) and its MIG slices by profile."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    allocatable = _amounts(status.get("allocatable") or {}, quantity)
    mig = {
        r.removeprefix(MIG_PREFIX): int(n)
        for r, n in allocatable.items()
        if r.startswith(MIG_PREFIX) and n > 0
    }
    trace = TraceNode(
        name=str(meta.get("name", "")),
        cpu_milli=int(allocatable.get("cpu", Decimal(0)) * 1000),
        memory_mib=int(allocatable.get("memory", Decimal(0)) / MIB),
        gpus=int(allocatable.get(GPU_RESOURCE, Decimal(0))),
        model=str((meta.get("labels") or {}).get(GPU_PRODUCT_LABEL, "")),
    )
    return trace, mig


@dataclass(frozen=True, slots=True)
class Held:
    """A pod that holds part of a node: bound to it, or chosen for it and not yet bound."""

    node: str
    ask: PodAsk


def place(
    pod: PodAsk,
    candidates: Sequence[Manifest],
    held: Sequence[Held],
    policy_name: str,
    workload: Sequence[PodAsk],
    quantity: Quantity,
) -> NodeChoice:
    """Where `pod` goes among `candidates` (Node objects) given what `held` takes of them."""
    if not candidates:
        return NodeChoice(None, "no candidate nodes")
    nodes = sorted((node_capacity(n, quantity) for n in candidates), key=lambda n: n[0].name)
    if pod.gpus > 0:
        state = _state([n for n, _ in nodes], held)
        policy = _policy(policy_name, workload)
        choice = choose(state, pod.trace_pod("pod"), policy, np.random.default_rng(0))
        if choice is None:
            return NodeChoice(None, "no candidate has the GPUs free by the extender's count")
        return NodeChoice(state.nodes[choice.node].name, f"{policy_name} chose it")
    if pod.mig:
        return _mig_best_fit(pod, nodes, held)
    return NodeChoice(None, "the pod asks no GPU the extender places")


def priorities(
    pod: PodAsk,
    candidates: Sequence[Manifest],
    held: Sequence[Held],
    policy_name: str,
    workload: Sequence[PodAsk],
    quantity: Quantity,
) -> dict[str, int]:
    """Each candidate's priority, 0..10: the policy's choice 10, every other candidate by its
    score, scaled between the lowest (0) and the choice."""
    chosen = place(pod, candidates, held, policy_name, workload, quantity)
    names = sorted(str((n.get("metadata") or {}).get("name", "")) for n in candidates)
    if chosen.node is None:
        return dict.fromkeys(names, 0)
    out = dict.fromkeys(names, 0)
    if pod.gpus > 0:
        nodes = sorted((node_capacity(n, quantity)[0] for n in candidates), key=lambda n: n.name)
        state = _state(nodes, held)
        trace = pod.trace_pod("pod")
        fits = np.flatnonzero(state.feasible(trace))
        scores = _policy(policy_name, workload).score(state, trace, fits)
        low, high = int(scores.min()), int(scores.max())
        for index, score in zip(fits.tolist(), scores.tolist(), strict=True):
            span = (score - low) * (MAX_EXTENDER_PRIORITY - 1) // max(high - low, 1)
            out[state.nodes[index].name] = span if high > low else 0
    out[chosen.node] = MAX_EXTENDER_PRIORITY
    return out


def _state(nodes: Sequence[TraceNode], held: Sequence[Held]) -> ClusterState:
    """The candidates (in name order: ties go to the first) with what `held` takes of them."""
    state = ClusterState.empty(list(nodes))
    index = {node.name: i for i, node in enumerate(state.nodes)}
    for pod in held:
        at = index.get(pod.node)
        if at is None:
            continue
        free = [g for g in range(state.nodes[at].gpus) if state.gpu_left[at, g] == MILLI]
        gpus = tuple(free[: pod.ask.gpus])  # an overcommitted node holds what it has
        taken = TracePod("held", pod.ask.cpu_milli, pod.ask.memory_mib, len(gpus), MILLI)
        state.place(at, taken, gpus)
    return state


def _policy(name: str, workload: Sequence[PodAsk]) -> Policy:
    workload_pods = [ask.trace_pod(f"w{i}") for i, ask in enumerate(workload)]
    return policy_named(name, workload_pods, pods_leave=True)  # pods come and go


def _mig_best_fit(
    pod: PodAsk, nodes: Sequence[tuple[TraceNode, dict[str, int]]], held: Sequence[Held]
) -> NodeChoice:
    used: dict[str, dict[str, int]] = {}
    for holder in held:
        for profile, count in holder.ask.mig.items():
            on = used.setdefault(holder.node, {})
            on[profile] = on.get(profile, 0) + count
    best: tuple[int, str] | None = None
    for node, slices in nodes:
        left_after = 0
        for profile, asked in pod.mig.items():
            left = slices.get(profile, 0) - used.get(node.name, {}).get(profile, 0) - asked
            if left < 0:
                break
            left_after += left
        else:
            if best is None or left_after < best[0]:
                best = (left_after, node.name)
    if best is None:
        return NodeChoice(None, "no candidate has the MIG slices free by the extender's count")
    return NodeChoice(best[1], "best fit of its MIG slices")
