"""Why a replica could not be placed, counted over every GPU.

Whole groups are answered at once (pool, mode, model, quota); inside a group the index's lists say
which GPUs run another mode or have no room, so only the few GPUs with room are asked one by one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from gpuplex.core.plan.demand import Sized, Unit, size_on
from gpuplex.core.plan.index import FleetIndex, GroupIndex
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.occupancy import best_mig_start, mode_problem, sharing_problem
from gpuplex.core.plan.quota import QuotaLedger
from gpuplex.core.spec.pools import pool_accepts


def why_not_placed(unit: Unit, index: FleetIndex, ledger: QuotaLedger) -> list[str]:
    if not index.states:
        return ["the fleet has no GPUs"]
    counts: Counter[str] = Counter()
    quota: list[str] = []
    for group in index.groups:
        slot, size = group.first, len(group.gpu_ids)
        if not pool_accepts(slot.pool, unit.pool):
            counts[f"in pool {slot.pool}; this workload runs in {unit.pool or 'no pool'}"] += size
            continue
        runs = group.runs_mig if unit.mode is Mode.MIG else group.runs_whole
        problem = None if runs else mode_problem(unit, slot)
        sized = size_on(unit, slot.model)
        if problem is None and sized is None and unit.gpu_model not in (None, slot.model.name):
            problem = f"model {slot.model.name}; this workload asks for {unit.gpu_model}"
        if problem is not None or sized is None:
            counts[problem or f"{slot.model.name} is too small or lacks the profile"] += size
            continue
        refused = ledger.problem(unit, sized)
        if refused is not None:
            quota += [refused] if refused not in quota else []
            continue
        _count_in_group(unit, sized, group, index, counts)
    reasons = quota + [
        f"{count} GPU{'s' if count > 1 else ''}: {problem}"
        for problem, count in counts.most_common()
    ]
    return reasons or ["no GPU fits"]


def _count_in_group(
    unit: Unit, sized: Sized, group: GroupIndex, index: FleetIndex, counts: Counter[str]
) -> None:
    for mode, count in group.mode_counts.items():
        if count and mode is not None and (mode is not unit.mode or mode is Mode.DEDICATED):
            counts[f"runs {mode}" if mode is not Mode.DEDICATED else "held whole"] += count
    usable_empty = group.empty_mig if unit.mode is Mode.MIG else group.empty_whole
    barred = group.mode_counts[None] - len(usable_empty)
    if barred:  # free GPUs whose MIG policy forbids this mode
        counts[
            "MIG is off on this GPU"
            if unit.mode is Mode.MIG
            else f"GPU is in MIG mode; {unit.mode} needs a non-MIG GPU"
        ] += barred
    open_empty = 0  # free GPUs on nodes that may take this mode (Kubernetes target)
    for _, gpu_id in usable_empty:
        node_problem = index.node_problem(unit, index.states[gpu_id].slot.node)
        if node_problem is not None:
            counts[f"free, but {node_problem}"] += 1
        else:
            open_empty += 1
    if unit.mode is Mode.DEDICATED:
        if open_empty:
            most = max(
                len(free)
                for node, free in group.empty_by_node.items()
                if index.node_problem(unit, node) is None
            )
            why = f"free, but no node has {unit.gpu_count} free together (most: {most})"
            counts[why] += open_empty
        return
    if unit.mode is Mode.MIG:
        for members in group.mig.values():
            if not members:
                continue
            if best_mig_start(index.states[members[0][1]], sized) is None:
                counts[f"no free MIG placement for {sized.profile_name}"] += len(members)
                continue
            for _, gpu_id in members:
                state = index.states[gpu_id]
                problem = sharing_problem(unit, state, index.tenants)
                counts[problem or index.node_problem(unit, state.slot.node) or "fits"] += 1
        return
    listed = group.shares[unit.mode]
    full = group.mode_counts[unit.mode] - len(listed)
    if full:
        counts[f"{unit.mode} GPU full"] += full
    enough = bisect_left(listed, (sized.memory_mib,))
    if enough:
        most_gib, needs_gib = listed[enough - 1][0] / 1024, sized.memory_mib / 1024
        why = f"not enough free memory (most free {most_gib:.1f} GiB, needs {needs_gib:.1f})"
        counts[why] += enough
    for _, _, gpu_id in listed[enough:]:
        fit = index.fit(unit, sized, index.states[gpu_id])
        counts[fit if isinstance(fit, str) else "fits"] += 1
