"""Why a replica could not be placed: every candidate GPU asked, reasons counted."""

from __future__ import annotations

from collections import Counter

from gpuplex.core.plan.demand import Unit, size_on
from gpuplex.core.plan.index import FleetIndex
from gpuplex.core.plan.occupancy import fit_on, mode_problem
from gpuplex.core.plan.quota import QuotaLedger
from gpuplex.core.spec.pools import pool_accepts


def why_not_placed(unit: Unit, index: FleetIndex, ledger: QuotaLedger) -> list[str]:
    counts: Counter[str] = Counter()
    quota: list[str] = []
    for state in index.states:
        slot = state.slot
        if not pool_accepts(slot.pool, unit.pool):
            counts[f"in pool {slot.pool}; this workload runs in {unit.pool or 'no pool'}"] += 1
            continue
        problem = mode_problem(unit, slot)
        sized = size_on(unit, slot.model)
        if problem is None and sized is None:
            problem = f"{slot.model.name} is too small or lacks the profile"
        if problem is None and sized is not None:
            refused = ledger.problem(unit, sized)
            if refused is not None:
                if refused not in quota:
                    quota.append(refused)
                continue
            fit = fit_on(unit, sized, state, index.tenants)
            problem = fit if isinstance(fit, str) else None
            if problem is None and unit.gpu_count > 1:
                problem = f"no node has {unit.gpu_count} free GPUs of this kind together"
        if problem is not None:
            counts[problem] += 1
    if not index.states:
        return ["the fleet has no GPUs"]
    reasons = quota + [
        f"{count} GPU{'s' if count > 1 else ''}: {problem}"
        for problem, count in counts.most_common()
    ]
    return reasons or ["no GPU fits"]
