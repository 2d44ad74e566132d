"""Why a workload got its mode and its GPUs, or why it did not: plain sentences from plan values."""

from __future__ import annotations

from gpuplex.core.plan.model import MigSlicePlan, Mode, Placement, Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.pools import fleet_pools, workload_pool
from gpuplex.errors import NotFoundError


def explain(spec: GpuplexSpec, plan: Plan, tenant_name: str, workload_name: str) -> list[str]:
    tenant = next((t for t in spec.tenants if t.name == tenant_name), None)
    workload = (
        next((w for w in tenant.workloads if w.name == workload_name), None) if tenant else None
    )
    if tenant is None or workload is None:
        raise NotFoundError(f"no workload {tenant_name}/{workload_name} in this spec")
    lines = [
        f"{tenant_name}/{workload_name}: {workload.kind}, {workload.pattern}, {workload.replicas} replica(s)"
    ]
    decision = next(
        (d for d in plan.decisions if (d.tenant, d.workload) == (tenant_name, workload_name)), None
    )
    if decision is not None:
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
    return lines


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
