"""What `explain` says about a LoRA adapter (`serve.lora_of`): it has no GPU of its own, so its
isolation is its host server's, its requests go to the host's replicas, and it pays its share of the
host's GPU time by its tokens."""

from __future__ import annotations

from gpuplex.core.plan.model import Decision, Plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.workloads import WorkloadSpec


def rider_lines(
    spec: GpuplexSpec, plan: Plan, tenant_name: str, workload: WorkloadSpec
) -> list[str] | None:
    """The isolation and routing lines of an adapter workload; None for any other workload."""
    if workload.serve is None or not workload.serve.lora_of:
        return None
    host_ref = workload.serve.lora_of
    owner, _, host_name = host_ref.partition("/")
    host_tenant = next((t for t in spec.tenants if t.name == owner), None)
    host = (
        next((w for w in host_tenant.workloads if w.name == host_name), None)
        if host_tenant
        else None
    )
    base = "?"
    if host is not None and host.serve is not None:
        base = host.serve.base_model or host.serve.model
    decision = _decision(plan, owner, host_name)
    mode = f"{decision.mode}" if decision is not None else "none (the host is not planned)"
    replicas = sorted(
        (p.replica, p.node, p.gpu_indices)
        for p in plan.placements
        if (p.tenant, p.workload) == (owner, host_name)
    )
    where = (
        ", ".join(
            f"#{replica} on {node} GPU {','.join(map(str, gpus))}"
            for replica, node, gpus in replicas
        )
        or "none: the host has no replica placed, so these requests fail"
    )
    lines = [
        f"isolation: {mode}, the host server's: it has no GPU or slice of its own",
        f"rides on {host_ref} (LoRA adapter on base {base})",
        f"requests for {workload.serve.model!r} are routed to {host_ref}'s replicas ({where}) "
        f"as model {tenant_name}/{workload.name}",
    ]
    if owner != tenant_name:
        lines.append(
            f"billing: {tenant_name} pays its share of {host_ref}'s GPU time, in proportion to "
            "its prompt + completion tokens among the tenants that used it in each roll-up window"
        )
    return lines


def _decision(plan: Plan, tenant: str, workload: str) -> Decision | None:
    return next((d for d in plan.decisions if (d.tenant, d.workload) == (tenant, workload)), None)
