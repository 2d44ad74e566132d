"""Variants of a cluster trace's pod list, as the FGD paper's artifact made of openb (Weng et al.,
USENIX ATC '23, §6: its `gpushare`, `multigpu`, `gpuspec` and `cpu` pod lists). Pure and seeded.

Each variant moves one share to a level, drawing pods from the base list's own pods of each kind,
so request shapes stay the trace's (the GPU-request families keep the list's size, `cpuonly` its
GPU pods):

- `gpushare`: the share of the GPU request (GPU milli of all GPU pods) asked by GPU-sharing pods
  (one GPU of less than 1000 milli). The CPU-only pods stay as in the base list.
- `multigpu`: the share of the GPU request asked by pods of more than one GPU.
- `gpuspec`: the share of the GPU request asked by pods that accept only one GPU model. Such a pod
  is a GPU pod of the base list given one model, drawn among the models with a node that can hold
  it, weighted by the square root of the model's GPU count: scarce models are asked for beyond
  their share of the cluster (as in the artifact's lists, where T4, P100 and V100 pods abound),
  without a model of 2 GPUs taking a seventh of the constrained demand.
- `cpuonly`: the share of pods (by count) that ask no GPU. The base list's GPU pods are all kept;
  CPU-only pods are drawn from its CPU-only pods to make up the share.

For the three GPU-request families, pods are drawn one at a time, from the kind the level asks
for while its share so far is below the level and from the other kind otherwise, so the share
lands within one pod's request of the level. The same base list, family, level and seed give the
same pods; pods are named `<family><level>-pod-<n>` (so the replay's name order is the draw order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpuplex.core.fragmentation.model import TracePod
from gpuplex.core.trace.model import TraceNode

#: the families and their levels (shares, 0..1): the lowest, a middle and the highest of the
#: artifact's levels for each (gpushare 20..100 %, multigpu 20..50 %, gpuspec 10..33 %, and CPU-only
#: pods 5..25 % of the pods)
FAMILY_LEVELS: dict[str, tuple[float, ...]] = {
    "gpushare": (0.2, 0.6, 1.0),
    "multigpu": (0.2, 0.3, 0.5),
    "gpuspec": (0.1, 0.2, 0.33),
    "cpuonly": (0.05, 0.1, 0.25),
}


@dataclass(frozen=True, slots=True)
class Variant:
    """One variant: a family and the level its share is set to."""

    family: str
    level: float

    @property
    def name(self) -> str:
        return f"{self.family}{round(self.level * 100):02d}"


def variants(families: Sequence[str] = ()) -> list[Variant]:
    """Every variant of `families` (all of them when empty), in family then level order."""
    unknown = [f for f in families if f not in FAMILY_LEVELS]
    if unknown:
        known = ", ".join(FAMILY_LEVELS)
        raise ValueError(f"unknown variant family {unknown[0]!r}: known families are {known}")
    return [Variant(f, level) for f in families or FAMILY_LEVELS for level in FAMILY_LEVELS[f]]


def is_multi_gpu(pod: TracePod) -> bool:
    return pod.num_gpu > 1


def gpu_request_share(pods: Sequence[TracePod], kind: Callable[[TracePod], bool]) -> float:
    """The share of the GPU pods' GPU milli asked by the pods of `kind` (0 without GPU pods)."""
    total = sum(p.total_gpu_milli for p in pods)
    part = sum(p.total_gpu_milli for p in pods if kind(p))
    return part / total if total else 0.0


def cpu_only_share(pods: Sequence[TracePod]) -> float:
    """The share of pods, by count, that ask no GPU."""
    return sum(1 for p in pods if not p.wants_gpu) / len(pods) if pods else 0.0


def is_model_constrained(pod: TracePod) -> bool:
    return pod.wants_gpu and bool(pod.gpu_models)


def generate(
    base: Sequence[TracePod], nodes: Sequence[TraceNode], variant: Variant, seed: int
) -> list[TracePod]:
    """The variant of `base` (on the cluster `nodes`, which `gpuspec` draws models from)."""
    if not 0 <= variant.level <= 1:
        raise ValueError(f"a variant's level is a share in [0, 1], not {variant.level}")
    rng = np.random.default_rng(seed)
    gpu_pods = [p for p in base if p.wants_gpu]
    cpu_pods = [p for p in base if not p.wants_gpu]
    if variant.family == "cpuonly":
        drawn = gpu_pods + _cpu_only(cpu_pods, len(gpu_pods), variant.level, rng)
    elif variant.family == "gpuspec":
        drawn = _constrained(gpu_pods, nodes, variant.level, rng) + cpu_pods
    elif variant.family in ("gpushare", "multigpu"):
        kind = (lambda p: p.is_shared) if variant.family == "gpushare" else is_multi_gpu
        wanted = [p for p in gpu_pods if kind(p)]
        other = [p for p in gpu_pods if not kind(p)]
        drawn = _mix(wanted, other, len(gpu_pods), variant.level, rng) + cpu_pods
    else:
        raise ValueError(f"unknown variant family {variant.family!r}")
    return [replace(p, name=f"{variant.name}-pod-{i:05d}") for i, p in enumerate(drawn)]


def _mix(
    wanted: Sequence[TracePod],
    other: Sequence[TracePod],
    count: int,
    level: float,
    rng: np.random.Generator,
) -> list[TracePod]:
    """`count` pods drawn from `wanted` while their share of the GPU milli is below `level`,
    from `other` otherwise."""
    if (level > 0 and not wanted) or (level < 1 and not other):
        raise ValueError("the base list lacks the pods a share of this level needs")
    out: list[TracePod] = []
    part = total = 0
    for _ in range(count):
        pool = wanted if level > 0 and (level >= 1 or part <= level * total) else other
        pod = pool[int(rng.integers(len(pool)))]
        out.append(pod)
        total += pod.total_gpu_milli
        part += pod.total_gpu_milli if pool is wanted else 0
    return out


def _cpu_only(
    cpu_pods: Sequence[TracePod], gpu_count: int, level: float, rng: np.random.Generator
) -> list[TracePod]:
    """CPU-only pods to go with `gpu_count` GPU pods so that they are a `level` share of all:
    drawn without replacement while the base list has enough, then with replacement."""
    if level >= 1:
        raise ValueError("a cpuonly level must be below 1: the variant keeps the GPU pods")
    count = round(level * gpu_count / (1 - level))
    if count and not cpu_pods:
        raise ValueError("the base list has no CPU-only pods to draw from")
    if count <= len(cpu_pods):
        return [cpu_pods[int(i)] for i in rng.choice(len(cpu_pods), size=count, replace=False)]
    extra = rng.integers(len(cpu_pods), size=count - len(cpu_pods))
    return [*cpu_pods, *(cpu_pods[int(i)] for i in extra)]


def _constrained(
    gpu_pods: Sequence[TracePod], nodes: Sequence[TraceNode], level: float, rng: np.random.Generator
) -> list[TracePod]:
    """The GPU pods redrawn, a `level` share of their GPU milli given one GPU model each."""
    capacity: dict[str, int] = {}
    for node in nodes:
        if node.gpus:
            capacity[node.model] = capacity.get(node.model, 0) + node.gpus
    holding: dict[tuple[int, int, int], list[str]] = {}  # by (GPUs, CPU, memory) asked
    out: list[TracePod] = []
    part = total = 0
    for _ in range(len(gpu_pods)):
        pod = gpu_pods[int(rng.integers(len(gpu_pods)))]
        if part < level * (total + pod.total_gpu_milli):
            shape = (pod.num_gpu, pod.cpu_milli, pod.memory_mib)
            if shape not in holding:
                holding[shape] = [m for m in capacity if _holds(nodes, m, pod)]
            models = holding[shape]
            if models:
                weights = np.array([math.sqrt(capacity[m]) for m in models])
                model = models[int(rng.choice(len(models), p=weights / weights.sum()))]
                pod = replace(pod, gpu_models=(model,))
                part += pod.total_gpu_milli
        total += pod.total_gpu_milli
        out.append(pod)
    return out


def _holds(nodes: Sequence[TraceNode], model: str, pod: TracePod) -> bool:
    """Has the cluster a node of `model` that could hold `pod` when empty?"""
    return any(
        n.model == model
        and n.gpus >= pod.num_gpu
        and n.cpu_milli >= pod.cpu_milli
        and n.memory_mib >= pod.memory_mib
        for n in nodes
    )
