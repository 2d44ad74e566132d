"""Turn the planner's working state into the Plan value, with moves and MIG changes against the
current plan."""

from __future__ import annotations

from gpuplex.core.plan.demand import Key
from gpuplex.core.plan.index import FleetIndex
from gpuplex.core.plan.model import (
    Decision,
    GpuView,
    Infeasible,
    MigReconfiguration,
    MigSlicePlan,
    Move,
    Occupant,
    Placement,
    Plan,
    Preemption,
    Summary,
)
from gpuplex.core.plan.occupancy import Hold
from gpuplex.core.plan.rounding import rounded_up


def mig_slice(hold: Hold) -> MigSlicePlan | None:
    profile = hold.sized.profile
    if profile is None or hold.mig_start is None:
        return None
    return MigSlicePlan(
        profile=profile.name,
        profile_id=profile.profile_id,
        start_slot=hold.mig_start,
        size_slots=profile.memory_slices,
    )


def placement_of(hold: Hold, index: FleetIndex, reason: str, mig: MigSlicePlan | None) -> Placement:
    slots = [index.states[g].slot for g in hold.gpu_ids]
    tenant, workload, replica = hold.unit.key
    return Placement(
        tenant=tenant,
        workload=workload,
        replica=replica,
        mode=hold.unit.mode,
        node=slots[0].node,
        gpu_indices=[slot.index for slot in slots],
        gpu_model=slots[0].model.name,
        mig=mig,
        memory_mib=hold.sized.memory_mib,
        thread_percent=hold.sized.thread_percent,
        compute_percent=hold.sized.compute_percent,
        reason=reason,
        rounded_up=rounded_up(hold.unit, hold.sized, slots[0].model),
    )


def assemble(
    *,
    policy: str,
    index: FleetIndex,
    holds: dict[Key, Hold],
    reasons: dict[Key, str],
    decisions: list[Decision],
    infeasible: list[Infeasible],
    preemptions: list[Preemption],
    current: Plan | None,
) -> Plan:
    # a MIG slice is one value, in its replica's placement and among its GPU's occupants alike
    slices = {key: mig_slice(hold) for key, hold in holds.items()}
    placements = [
        placement_of(holds[key], index, reasons[key], slices[key]) for key in sorted(holds)
    ]
    gpus = [_gpu_view(state_id, index, slices) for state_id in range(len(index.states))]
    moves = _moves(current, placements)
    return Plan(
        policy=policy,
        summary=Summary(
            gpus_total=len(gpus),
            gpus_used=sum(1 for gpu in gpus if gpu.occupants),
            replicas_placed=len(placements),
            replicas_infeasible=len(infeasible),
            preemptions=len(preemptions),
            moves=len(moves),
        ),
        decisions=decisions,
        placements=placements,
        infeasible=sorted(infeasible, key=lambda i: (i.tenant, i.workload, i.replica)),
        preemptions=sorted(preemptions, key=lambda p: (p.tenant, p.workload, p.replica)),
        moves=moves,
        mig_reconfigurations=_mig_changes(current, gpus),
        gpus=gpus,
    )


def _gpu_view(gpu_id: int, index: FleetIndex, slices: dict[Key, MigSlicePlan | None]) -> GpuView:
    state = index.states[gpu_id]
    slot = state.slot
    occupants = [
        Occupant(
            tenant=hold.unit.key[0],
            workload=hold.unit.key[1],
            replica=hold.unit.key[2],
            mig=slices[hold.unit.key],
            memory_mib=hold.memory_per_gpu_mib,
            thread_percent=hold.sized.thread_percent,
        )
        for hold in sorted(state.holds.values(), key=lambda h: (h.mig_start or 0, h.unit.key))
    ]
    return GpuView(
        node=slot.node,
        index=slot.index,
        model=slot.model.name,
        uuid=slot.uuid,
        pool=slot.pool,
        mode=state.mode,
        memory_mib=slot.model.memory_mib,
        occupants=occupants,
    )


def _moves(current: Plan | None, placements: list[Placement]) -> list[Move]:
    if current is None:
        return []
    before = {(p.tenant, p.workload, p.replica): p for p in current.placements}
    moves = []
    for after in placements:
        old = before.get((after.tenant, after.workload, after.replica))
        if old is not None and _where(old) != _where(after):
            moves.append(
                Move(
                    tenant=after.tenant,
                    workload=after.workload,
                    replica=after.replica,
                    from_node=old.node,
                    from_gpu_indices=old.gpu_indices,
                    from_mode=old.mode,
                    from_mig=old.mig,
                    to_node=after.node,
                    to_gpu_indices=after.gpu_indices,
                    to_mode=after.mode,
                    to_mig=after.mig,
                )
            )
    return moves


def _where(placement: Placement) -> tuple[object, ...]:
    """What a replica's process is bound to: changing any of it means restarting the replica."""
    return (placement.node, placement.gpu_indices, placement.mode, placement.mig)


def _layout(gpu: GpuView) -> list[str]:
    return sorted(f"{o.mig.profile}@{o.mig.start_slot}" for o in gpu.occupants if o.mig is not None)


def _mig_changes(current: Plan | None, gpus: list[GpuView]) -> list[MigReconfiguration]:
    """GPUs whose MIG geometry differs from the current plan's (or whose card was replaced by
    another model); only those need reconfiguring."""
    if current is None:
        return []
    before = {(gpu.node, gpu.index): (gpu.model, _layout(gpu)) for gpu in current.gpus}
    changes = []
    for gpu in gpus:
        old_model, old = before.get((gpu.node, gpu.index), (gpu.model, []))
        new = _layout(gpu)
        if old != new or (old_model != gpu.model and new):
            changes.append(
                MigReconfiguration(node=gpu.node, gpu_index=gpu.index, before=old, after=new)
            )
    return changes
