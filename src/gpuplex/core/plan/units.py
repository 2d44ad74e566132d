"""From the spec to the list of replicas to place, each with its isolation mode decided."""

from __future__ import annotations

from gpuplex.core.plan.demand import Unit, memory_mib_of, mig_profile_on, size_on
from gpuplex.core.plan.inventory import GpuSlot
from gpuplex.core.plan.isolation import choose_mode
from gpuplex.core.plan.model import Decision, Mode
from gpuplex.core.spec import GpuplexSpec, TenantSpec, WorkloadSpec
from gpuplex.core.spec.pools import fleet_pools, pool_accepts, workload_pool


def build_units(spec: GpuplexSpec, slots: list[GpuSlot]) -> tuple[list[Decision], list[Unit]]:
    pools = fleet_pools(spec.fleet)
    # one GPU of each kind the planner tells apart: model, pool and MIG policy
    groups = list({(*slot.group, slot.mig_policy): slot for slot in slots}.values())
    decided: dict[tuple[str, str], Decision] = {}
    units: list[Unit] = []
    # what GPUs a request may use depends on its pool and GPU request alone, of which a fleet's
    # workloads have a few hundred kinds: each is worked out once
    available: dict[tuple[object, ...], tuple[bool, bool]] = {}
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.gpu is None:
                continue  # a LoRA adapter: decided below, from its base
            pool = workload_pool(pools, workload)
            asked = _request(workload, pool)
            if asked not in available:
                available[asked] = _available(_unit(tenant, workload, pool, Mode.MIG, 0), groups)
            mig_available, whole_available = available[asked]
            choice = choose_mode(
                tenant, workload, mig_available=mig_available, whole_available=whole_available
            )
            decided[(tenant.name, workload.name)] = Decision(
                tenant=tenant.name,
                workload=workload.name,
                mode=choice.mode,
                reason=choice.reason,
            )
            # Unit's fields after the mode are those of the request, in its order
            units += [
                Unit((tenant.name, workload.name, r), tenant, choice.mode, *asked)
                for r in range(workload.replicas)
            ]
    decisions = [
        decided.get((t.name, w.name)) or _adapter_decision(t, w, decided)
        for t in spec.tenants
        for w in t.workloads
    ]
    # every replica of a workload sizes alike, and so does every request of one kind
    by_workload: dict[tuple[str, str], tuple[int, float, int]] = {}
    by_request: dict[tuple[object, ...], tuple[int, float, int]] = {}
    for unit in units:
        if unit.key[:2] not in by_workload:
            kind = (unit.priority, unit.mode, *_request_of(unit))
            if kind not in by_request:
                by_request[kind] = placement_size(unit, groups)
            by_workload[unit.key[:2]] = by_request[kind]
    return decisions, sorted(units, key=lambda u: (*by_workload[u.key[:2]], *u.key))


Request = tuple[str | None, int, int | None, int | None, str | None, str | None]


def _request(workload: WorkloadSpec, pool: str | None) -> Request:
    """What, besides its mode and priority, decides where a replica may go and how large it is:
    pool, GPU count, memory (MiB), compute percent, MIG profile and GPU model: `Unit`'s fields after
    its mode, in their order."""
    request = workload.gpu
    if request is None:
        return (pool, 1, None, None, None, None)
    memory = request.memory_gib
    return (
        pool,
        request.count or 1,
        memory_mib_of(memory) if memory is not None else None,
        request.compute_percent,
        request.mig_profile,
        request.model,
    )


def _request_of(unit: Unit) -> Request:
    return (
        unit.pool,
        unit.gpu_count,
        unit.memory_mib,
        unit.compute_percent,
        unit.mig_profile,
        unit.gpu_model,
    )


def _available(probe: Unit, groups: list[GpuSlot]) -> tuple[bool, bool]:
    """Whether some GPU in the probe's pool can run it as a MIG slice, and as a whole GPU."""
    mig_available = any(
        slot.runs_mig and pool_accepts(slot.pool, probe.pool) and mig_profile_on(probe, slot.model)
        for slot in groups
    )
    whole_available = any(
        slot.runs_whole
        and pool_accepts(slot.pool, probe.pool)
        and probe.gpu_model in (None, slot.model.name)
        for slot in groups
    )
    return mig_available, whole_available


def _adapter_decision(
    tenant: TenantSpec, workload: WorkloadSpec, decided: dict[tuple[str, str], Decision]
) -> Decision:
    """A LoRA adapter runs inside its base model's server: it gets the base's isolation."""
    base_ref = workload.serve.lora_of if workload.serve and workload.serve.lora_of else "?/?"
    owner, _, name = base_ref.partition("/")
    base = decided.get((owner, name))
    mode = base.mode if base else Mode.MPS
    reason = f"LoRA adapter inside {base_ref}'s server, which runs {mode}; no GPU of its own"
    return Decision(tenant=tenant.name, workload=workload.name, mode=mode, reason=reason)


def _unit(
    tenant: TenantSpec, workload: WorkloadSpec, pool: str | None, mode: Mode, replica: int
) -> Unit:
    return Unit((tenant.name, workload.name, replica), tenant, mode, *_request(workload, pool))


def placement_size(unit: Unit, groups: list[GpuSlot]) -> tuple[int, float, int]:
    """The sort key before the name: higher priority first, then larger demand first (first-fit
    decreasing); replicas then go by tenant, workload and replica."""
    size_memory, size_compute = 0.0, 0
    for slot in groups:
        sized = size_on(unit, slot.model)
        if sized is not None and pool_accepts(slot.pool, unit.pool):
            size_memory = sized.memory_mib / slot.model.memory_mib
            size_compute = sized.compute_percent
            break
    return (-unit.priority, -size_memory, -size_compute)
