"""Priority preemption: which lower-priority replicas to evict so a higher-priority one fits.

Each GPU where evicting every lower-priority replica would make room offers up to two victim
sets: the fewest replicas that make room (with at most 8 of them, every set of 1, 2 and 3 is
tried) and the lowest-priority replicas first, largest first, until the replica fits. Each set is
tried out: the victims are lifted off, the replica is placed, and each victim, highest priority
first, is put wherever it fits now without evicting anything; the trial is then undone. Sets are
compared on what the trial leaves behind, in this order:

1. the replicas left without a place, their priorities compared from the highest down: leaving
   out one priority-100 replica is worse than leaving out four priority-0 ones, and a victim
   that moves elsewhere is better than one left out;
2. the disruption: victims moved (each a restart) plus GPUs whose MIG layout changes;
3. fewer victims, then the lowest priorities, then the least memory freed, then GPU order.

The placer applies the chosen set as tried: the moved victims go where the trial put them, the
ones left out go back in its queue, where one may in turn evict replicas of a still lower
priority (that only lowers the priorities left out). Multi-GPU dedicated replicas are not
preempted for yet. docs/plan-format.md (re-planning) states the same objective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import combinations

from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.index import Candidate, FleetIndex
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.occupancy import GpuState, Hold
from gpuplex.core.plan.quota import QuotaLedger

_EXHAUSTIVE_UP_TO = 3  # largest victim set tried exhaustively
_EXHAUSTIVE_CANDIDATES = 8  # ... when a GPU holds at most this many lower-priority replicas

Cost = tuple[tuple[int, ...], int, int, int, int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class Eviction:
    victims: tuple[Hold, ...]
    candidate: Candidate  # where the preempting replica goes
    moved: tuple[tuple[Hold, Candidate], ...]  # victims that fit elsewhere at once, and where
    left_out: tuple[Hold, ...]  # victims with no free place: back in the queue
    mig_changes: int  # GPUs whose MIG layout this eviction changes


def find_eviction(unit: Unit, index: FleetIndex, ledger: QuotaLedger) -> Eviction | None:
    """The cheapest eviction (module docstring) that makes room for `unit`, or None. A demand
    the preemptor's own quota would refuse evicts nothing."""
    if unit.gpu_count > 1 or not any(
        count and priority < unit.priority for priority, count in index.held_priorities.items()
    ):
        return None  # in a fresh plan nothing placed has a lower priority: placement order
    best: tuple[Cost, Eviction] | None = None
    for group, sized in index.candidate_groups(unit):
        if ledger.problem(unit, sized) is not None:
            continue
        for gpu_id in group.gpu_ids:
            state = index.states[gpu_id]
            lower = sorted(
                (h for h in state.holds.values() if h.unit.priority < unit.priority),
                key=lambda h: (h.unit.priority, -h.sized.memory_mib, h.unit.key),
            )
            if not lower or _fit_without(unit, sized, state, tuple(lower), index) is None:
                continue  # even evicting every lower-priority replica here would not make room
            for victims, start in _victim_sets(unit, sized, state, lower, index):
                mig_start = start if start >= 0 else None
                candidate = Candidate((gpu_id,), sized, mig_start, (0, 0, 0, state.slot.order), "")
                eviction = try_eviction(unit, candidate, victims, index, ledger)
                cost = eviction_cost(eviction, state.slot.order)
                if best is None or cost < best[0]:
                    best = (cost, eviction)
    return best[1] if best else None


def eviction_cost(eviction: Eviction, order: tuple[int, int]) -> Cost:
    """The objective of the module docstring as a tuple: smaller is better."""
    victims = eviction.victims
    return (
        tuple(sorted((v.unit.priority for v in eviction.left_out), reverse=True)),
        len(eviction.moved) + eviction.mig_changes,
        len(victims),
        max(v.unit.priority for v in victims),
        sum(v.sized.memory_mib for v in victims),
        order,
    )


def try_eviction(
    unit: Unit,
    candidate: Candidate,
    victims: tuple[Hold, ...],
    index: FleetIndex,
    ledger: QuotaLedger,
) -> Eviction:
    """Evict `victims`, place `unit` at `candidate`, put each victim where it fits now, note what
    happened, and undo it all: the index and the ledger are as they were."""
    for victim in victims:
        index.release(victim)
        ledger.remove(victim.unit, victim.sized)
    placed = index.assign(unit, candidate)
    ledger.add(unit, candidate.sized)
    moved: list[tuple[Hold, Candidate, Hold]] = []
    left_out: list[Hold] = []
    for victim in sorted(victims, key=lambda v: (-v.unit.priority, v.unit.key)):
        spot = index.search(victim.unit, partial(ledger.problem, victim.unit))
        if spot is None:
            left_out.append(victim)
            continue
        moved.append((victim, spot, index.assign(victim.unit, spot)))
        ledger.add(victim.unit, spot.sized)
    for victim, spot, hold in reversed(moved):
        index.release(hold)
        ledger.remove(victim.unit, spot.sized)
    index.release(placed)
    ledger.remove(unit, candidate.sized)
    for victim in victims:
        index.put_back(victim)
        ledger.add(victim.unit, victim.sized)
    changed = {h.gpu_ids[0] for h in (*victims, placed) if h.mig_start is not None}
    changed |= {h.gpu_ids[0] for _, _, h in moved if h.mig_start is not None}
    return Eviction(
        victims=victims,
        candidate=candidate,
        moved=tuple((victim, spot) for victim, spot, _ in moved),
        left_out=tuple(left_out),
        mig_changes=len(changed),
    )


def _victim_sets(
    unit: Unit, sized: Sized, state: GpuState, lower: list[Hold], index: FleetIndex
) -> list[tuple[tuple[Hold, ...], int]]:
    """The fewest victims on this GPU that make room, and the lowest-priority-first prefix that
    does (the same set when they agree), each with the fit's start (-1: not a MIG slice)."""
    sets: list[tuple[tuple[Hold, ...], int]] = []
    if len(lower) <= _EXHAUSTIVE_CANDIDATES:
        sets += _fewest(unit, sized, state, lower, index)
    for size in range(1, len(lower) + 1):
        start = _fit_without(unit, sized, state, tuple(lower[:size]), index)
        if start is not None:
            if not sets or sets[0][0] != tuple(lower[:size]):
                sets.append((tuple(lower[:size]), start))
            break
    return sets


def _fewest(
    unit: Unit, sized: Sized, state: GpuState, lower: list[Hold], index: FleetIndex
) -> list[tuple[tuple[Hold, ...], int]]:
    short, frees = _shortfall(unit, sized, state)
    freed = sorted((frees(h) for h in lower), reverse=True)
    for size in range(1, _EXHAUSTIVE_UP_TO + 1):
        if sum(freed[:size]) < short:
            continue  # even the `size` largest victims free too little: no set of this size fits
        for victims in combinations(lower, size):
            start = _fit_without(unit, sized, state, victims, index)
            if start is not None:
                return [(victims, start)]
    return []


def _shortfall(unit: Unit, sized: Sized, state: GpuState) -> tuple[int, Callable[[Hold], int]]:
    """A necessary condition for a fit, to skip victim sets cheaply: what is missing, and what
    evicting one hold gives back. Whole GPUs need every hold gone, a MIG slice its memory slots,
    a share its memory."""
    if unit.mode is Mode.DEDICATED:
        return len(state.holds), lambda _: 1
    profile = sized.profile
    if profile is not None and state.mode is Mode.MIG:
        free = state.slot.model.mig.memory_slices if state.slot.model.mig else 0
        free -= state.mig_mask.bit_count()
        return profile.memory_slices - free, _mig_slots
    if unit.mode in (Mode.MPS, Mode.TIMESLICE) and state.mode is unit.mode:
        return sized.memory_mib - state.free_memory_mib, lambda h: h.memory_per_gpu_mib
    return 0, lambda _: 0


def _mig_slots(hold: Hold) -> int:
    profile = hold.sized.profile
    return profile.memory_slices if profile is not None and hold.mig_start is not None else 0


def _fit_without(
    unit: Unit, sized: Sized, state: GpuState, victims: tuple[Hold, ...], index: FleetIndex
) -> int | None:
    """Try the fit with the victims lifted off this GPU's state; the state is restored after."""
    for victim in victims:
        state.remove(victim.unit.key)
    try:
        fit = index.fit_lifted(unit, sized, state)
    finally:
        for victim in victims:
            state.add(victim)
    return fit if isinstance(fit, int) else None
