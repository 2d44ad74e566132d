"""Priority preemption: the smallest set of lower-priority replicas whose eviction makes room.

Per GPU, sets are tried by size (1, 2, 3 replicas, exhaustively), then all lower-priority replicas
there, lowest priority first. Across GPUs the choice is: fewest evicted, then the lowest priorities,
then the least memory freed, then GPU order. Multi-GPU dedicated replicas are not preempted for yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.index import Candidate, FleetIndex
from gpuplex.core.plan.occupancy import GpuState, Hold, fit_on

_EXHAUSTIVE_UP_TO = 3


@dataclass(frozen=True, slots=True)
class Eviction:
    victims: tuple[Hold, ...]
    candidate: Candidate


def find_eviction(
    unit: Unit, index: FleetIndex, refuse: Callable[[Sized], str | None]
) -> Eviction | None:
    """`refuse` is the preemptor's quota check: no eviction for a demand its quota would refuse."""
    if unit.gpu_count > 1 or not any(
        count and priority < unit.priority for priority, count in index.held_priorities.items()
    ):
        return None  # in a fresh plan nothing placed has a lower priority: placement order
    best: tuple[tuple[int, int, int, tuple[int, int]], Eviction] | None = None
    for group, sized in index.candidate_groups(unit):
        if refuse(sized) is not None:
            continue
        for gpu_id in group.gpu_ids:
            state = index.states[gpu_id]
            lower = sorted(
                (h for h in state.holds.values() if h.unit.priority < unit.priority),
                key=lambda h: (h.unit.priority, -h.sized.memory_mib, h.unit.key),
            )
            if not lower:
                continue
            for victims in _victim_sets(lower):
                start = _fit_without(unit, sized, state, victims, index)
                if start is None:
                    continue
                cost = (
                    len(victims),
                    max(v.unit.priority for v in victims),
                    sum(v.sized.memory_mib for v in victims),
                    state.slot.order,
                )
                if best is None or cost < best[0]:
                    mig_start = start if start >= 0 else None
                    candidate = Candidate(
                        (gpu_id,), sized, mig_start, (0, 0, 0, state.slot.order), ""
                    )
                    best = (cost, Eviction(victims, candidate))
                break
    return best[1] if best else None


def _victim_sets(lower: list[Hold]) -> list[tuple[Hold, ...]]:
    sets: list[tuple[Hold, ...]] = []
    for size in range(1, min(len(lower), _EXHAUSTIVE_UP_TO) + 1):
        sets += combinations(lower, size)
    if len(lower) > _EXHAUSTIVE_UP_TO:
        sets.append(tuple(lower))
    return sets


def _fit_without(
    unit: Unit, sized: Sized, state: GpuState, victims: tuple[Hold, ...], index: FleetIndex
) -> int | None:
    """Try the fit with the victims lifted off this GPU's state; the state is restored after."""
    for victim in victims:
        state.remove(victim.unit.key)
    try:
        fit = fit_on(unit, sized, state, index.tenants)
    finally:
        for victim in victims:
            state.add(victim)
    return fit if isinstance(fit, int) else None
