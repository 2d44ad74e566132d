"""What a GPU request, or a planned replica, counts against the queues. Pure.

A request in any form the spec allows becomes one kind of the queue tree (`tree`): whole GPUs
count `gpus`, a share counts its memory (`gpu_memory_gib`) and, when it names one, its compute
(`compute_percent`), a MIG slice counts one of its profile (`mig:<profile>`). A planned replica
counts what the plan gave it: a dedicated replica its GPUs, a MIG replica its slice, an MPS or
time-slice replica its memory and compute. The spec's long-running replicas hold their capacity
for good: they are holdings the admission rules never preempt.
"""

from __future__ import annotations

from gpuplex.core.plan.model import Mode, Placement, Plan
from gpuplex.core.queues.admission import Holding
from gpuplex.core.queues.drf import Resources
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX
from gpuplex.core.spec.workloads import GpuRequestSpec

MIB_PER_GIB = 1024


def request_ask(request: GpuRequestSpec) -> dict[str, float]:
    """What one replica asking `request` counts against its queues."""
    if request.count is not None:
        return {GPUS: float(request.count)}
    if request.mig_profile is not None:
        return {MIG_PREFIX + request.mig_profile: 1.0}
    ask = {GPU_MEMORY_GIB: float(request.memory_gib or 0.0)}
    if request.compute_percent is not None:
        ask[COMPUTE_PERCENT] = float(request.compute_percent)
    return ask


def placement_holds(placement: Placement) -> dict[str, float]:
    """What a planned replica holds, in the queues' kinds."""
    if placement.mode is Mode.MIG and placement.mig is not None:
        return {MIG_PREFIX + placement.mig.profile: 1.0}
    if placement.mode is Mode.DEDICATED:
        return {GPUS: float(len(placement.gpu_indices))}
    held: dict[str, float] = {GPU_MEMORY_GIB: placement.memory_mib / MIB_PER_GIB}
    if placement.thread_percent is not None or placement.mode is Mode.MPS:
        held[COMPUTE_PERCENT] = float(placement.compute_percent)
    return held


def plan_holdings(plan: Plan) -> list[Holding]:
    """The plan's placed replicas as holdings the admission rules never preempt."""
    return [
        Holding(
            id=f"{p.tenant}/{p.workload}/{p.replica}",
            tenant=p.tenant,
            resources=placement_holds(p),
            preemptible=False,
        )
        for p in plan.placements
    ]


def total(asks: list[Resources]) -> dict[str, float]:
    out: dict[str, float] = {}
    for ask in asks:
        for kind, amount in ask.items():
            out[kind] = out.get(kind, 0.0) + amount
    return out
