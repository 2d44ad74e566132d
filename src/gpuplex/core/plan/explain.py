"""Why a workload got its mode and its GPUs, or why it did not: plain sentences from plan values."""

from __future__ import annotations

from collections.abc import Callable

from gpuplex.core.plan.explain_rider import rider_lines
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.model import GpuView, MigSlicePlan, Mode, Placement, Plan, RoundedUp
from gpuplex.core.plan.node_sharing import NO_MPS_BESIDE_MIG, ONE_METHOD, target_of
from gpuplex.core.plural import counted
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy
from gpuplex.core.spec.pools import fleet_pools, workload_pool
from gpuplex.core.target import Target
from gpuplex.errors import NotFoundError

_METHOD = {Mode.DEDICATED: "whole GPUs", Mode.MPS: "MPS", Mode.TIMESLICE: "time-slicing"}
_NEED = {
    Mode.DEDICATED: "whole GPUs",
    Mode.MPS: "MPS shares",
    Mode.TIMESLICE: "time-sliced shares",
}


def explain(
    spec: GpuplexSpec,
    plan: Plan,
    tenant_name: str,
    workload_name: str,
    *,
    target: Target | None = None,
    cost: Callable[[Placement], str] | None = None,
) -> list[str]:
    """`target` says which rules the plan was made under (by default the spec's target): on
    Kubernetes each node the workload runs on also says why it got its sharing method. `cost`
    says what a placement costs (the pricing lives a layer above: core/report/placement_cost.py)."""
    tenant = next((t for t in spec.tenants if t.name == tenant_name), None)
    workload = (
        next((w for w in tenant.workloads if w.name == workload_name), None) if tenant else None
    )
    if tenant is None or workload is None:
        raise NotFoundError(f"no workload {tenant_name}/{workload_name} in this spec")
    lines = [
        f"{tenant_name}/{workload_name}: {workload.kind}, {workload.pattern}, {counted(workload.replicas, 'replica')}"
    ]
    decision = next(
        (d for d in plan.decisions if (d.tenant, d.workload) == (tenant_name, workload_name)), None
    )
    riding = rider_lines(spec, plan, tenant_name, workload)
    if riding is not None:
        lines += riding  # a LoRA adapter: the host server's isolation, and where requests go
    elif decision is not None:
        lines.append(f"isolation: {decision.mode} because {decision.reason}")
    pool = workload_pool(fleet_pools(spec.fleet), workload)
    lines.append(
        f"pool: {pool}, plus GPUs in no pool" if pool else "pool: none, so only GPUs in no pool"
    )
    lines.append(f"priority {tenant.priority}, tier {tenant.tier}, policy {plan.policy}")
    mine = (tenant_name, workload_name)
    for placement in plan.placements:
        if (placement.tenant, placement.workload) == mine:
            lines.append(f"replica {placement.replica}: {_where(placement)} ({placement.reason})")
            if placement.rounded_up is not None:
                lines.append(f"  rounded up: {rounding_sentence(placement.rounded_up)}")
            if cost is not None:
                lines.append(f"  cost: {cost(placement)}")
    for infeasible in plan.infeasible:
        if (infeasible.tenant, infeasible.workload) == mine:
            lines.append(f"replica {infeasible.replica}: NOT PLACED")
            lines += [f"  - {reason}" for reason in infeasible.reasons]
    for preempted in plan.preemptions:
        if (preempted.tenant, preempted.workload) == mine:
            lines.append(f"replica {preempted.replica}: PREEMPTED, {preempted.reason}")
    for move in plan.moves:
        if (move.tenant, move.workload) == mine:
            before = f"{move.from_node} GPU {move.from_gpu_indices} ({_slice(move.from_mode, move.from_mig)})"
            after = (
                f"{move.to_node} GPU {move.to_gpu_indices} ({_slice(move.to_mode, move.to_mig)})"
            )
            lines.append(f"replica {move.replica}: moves from {before} to {after}")
    if (target or target_of(spec)) is Target.KUBERNETES:
        nodes = dict.fromkeys(p.node for p in plan.placements if (p.tenant, p.workload) == mine)
        lines += [_node_method(spec, plan, node) for node in nodes]
    return lines


def _node_method(spec: GpuplexSpec, plan: Plan, node: str) -> str:
    """Why a node's full GPUs run the one sharing method they do, and what MIG allows beside it."""
    pinned = {
        s.index
        for s in build_inventory(spec.fleet, PlacementPolicy.BINPACK)
        if s.node == node and s.runs_mig and not s.runs_whole
    }
    gpus = [g for g in plan.gpus if g.node == node]
    mig = [g for g in gpus if g.mode is Mode.MIG or g.index in pinned]
    full = [g for g in gpus if g.mode not in (None, Mode.MIG) and g.index not in pinned]
    methods = [g.mode for g in full if g.mode is not None]
    if not methods:
        return (
            f"node {node}: MIG slices ({_workloads(mig)}) and no full GPU in use; it takes no "
            f"MPS, since {NO_MPS_BESIDE_MIG}"
        )
    method = methods[0]
    users = _workloads(full)
    verb = "needs" if "," not in users else "need"
    line = (
        f"node {node}: {_METHOD[method]}, because {users} {verb} {_NEED[method]} and "
        f"{ONE_METHOD}, so its full GPUs take only {method} replicas"
    )
    if method is Mode.MPS:
        return f"{line}; it holds no MIG slices, since {NO_MPS_BESIDE_MIG}"
    if mig:
        return f"{line}; MIG slices beside them: {_workloads(mig) or 'none yet'}"
    return line


def _workloads(gpus: list[GpuView]) -> str:
    return ", ".join(sorted({f"{o.tenant}/{o.workload}" for g in gpus for o in g.occupants}))


def _slice(mode: Mode, mig: MigSlicePlan | None) -> str:
    return f"{mig.profile}@{mig.start_slot}" if mig is not None else str(mode)


def _where(placement: Placement) -> str:
    gpus = ",".join(str(i) for i in placement.gpu_indices)
    where = f"{placement.node} GPU {gpus} ({placement.gpu_model})"
    if placement.mig is not None:
        return f"{where}, MIG {placement.mig.profile} at slot {placement.mig.start_slot}"
    if placement.thread_percent is not None:
        return (
            f"{where}, MPS {placement.memory_mib} MiB pinned, {placement.thread_percent}% threads"
        )
    if placement.mode == "timeslice":
        return f"{where}, time-sliced, {placement.memory_mib} MiB accounted"
    return f"{where}, whole GPU"


def gib(memory_mib: int) -> str:
    """MiB as GiB with up to two decimals and no trailing zeros: 40448 -> `39.5 GiB`."""
    return f"{memory_mib / 1024:.2f}".rstrip("0").rstrip(".") + " GiB"


def rounding_sentence(rounded: RoundedUp) -> str:
    """`asked 40 GiB; the next smaller profile, 4g.40gb, holds only 39.5 GiB (40448 MiB), so it
    got 7g.80gb: 79.25 GiB (81152 MiB)`."""
    asked = f"asked {gib(rounded.requested_memory_mib)}"
    if rounded.requested_compute_percent is not None:
        asked += f" and {rounded.requested_compute_percent}% compute"
    if rounded.smaller is not None and rounded.smaller_memory_mib is not None:
        holds = (
            "holds only" if rounded.smaller_memory_mib < rounded.requested_memory_mib else "holds"
        )
        small = f"{gib(rounded.smaller_memory_mib)} ({rounded.smaller_memory_mib} MiB)"
        short = "" if holds == "holds only" else " but too little compute"
        asked += f"; the next smaller profile, {rounded.smaller}, {holds} {small}{short}"
    got = f"{gib(rounded.granted_memory_mib)} ({rounded.granted_memory_mib} MiB)"
    return f"{asked}, so it got {rounded.granted}: {got}"
