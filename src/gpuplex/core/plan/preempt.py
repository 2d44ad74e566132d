"""Priority preemption: the smallest set of lower-priority replicas whose eviction makes room.

A GPU is considered only if evicting all its lower-priority replicas would make room. Then, with
at most 8 of them, every set of 1, 2 and 3 is tried; otherwise (MPS GPUs with dozens of clients)
they are evicted in order, lowest priority and largest first, until the replica fits. Across GPUs
the choice is: fewest evicted, then the lowest priorities, then the least memory freed, then GPU
order. Multi-GPU dedicated replicas are not preempted for yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations

from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.index import Candidate, FleetIndex
from gpuplex.core.plan.occupancy import GpuState, Hold

_EXHAUSTIVE_UP_TO = 3  # largest victim set tried exhaustively
_EXHAUSTIVE_CANDIDATES = 8  # ... when a GPU holds at most this many lower-priority replicas


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
            if not lower or _fit_without(unit, sized, state, tuple(lower), index) is None:
                continue  # even evicting every lower-priority replica here would not make room
            most = best[0][0] if best else len(lower)
            found = _smallest_set(unit, sized, state, lower, index, most)
            if found is None:
                continue
            victims, start = found
            cost = (
                len(victims),
                max(v.unit.priority for v in victims),
                sum(v.sized.memory_mib for v in victims),
                state.slot.order,
            )
            if best is None or cost < best[0]:
                mig_start = start if start >= 0 else None
                candidate = Candidate((gpu_id,), sized, mig_start, (0, 0, 0, state.slot.order), "")
                best = (cost, Eviction(victims, candidate))
    return best[1] if best else None


def _smallest_set(
    unit: Unit,
    sized: Sized,
    state: GpuState,
    lower: list[Hold],
    index: FleetIndex,
    most: int,
) -> tuple[tuple[Hold, ...], int] | None:
    """The fewest victims (at most `most`) on this GPU that make room, with the fit's start.
    Exhaustive over sets of up to 3 when there are at most 8 candidates; otherwise evict in order
    (lowest priority, then largest, first) until the replica fits."""
    if len(lower) <= _EXHAUSTIVE_CANDIDATES:
        for size in range(1, min(_EXHAUSTIVE_UP_TO, most) + 1):
            for victims in combinations(lower, size):
                start = _fit_without(unit, sized, state, victims, index)
                if start is not None:
                    return victims, start
    for size in range(1, min(len(lower), most) + 1):
        start = _fit_without(unit, sized, state, tuple(lower[:size]), index)
        if start is not None:
            return tuple(lower[:size]), start
    return None


def _fit_without(
    unit: Unit, sized: Sized, state: GpuState, victims: tuple[Hold, ...], index: FleetIndex
) -> int | None:
    """Try the fit with the victims lifted off this GPU's state; the state is restored after."""
    for victim in victims:
        state.remove(victim.unit.key)
    try:
        fit = index.fit(unit, sized, state)
    finally:
        for victim in victims:
            state.add(victim)
    return fit if isinstance(fit, int) else None
