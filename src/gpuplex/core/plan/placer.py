"""make_plan: the pure, deterministic planner. Equal inputs give byte-identical plans.

1. Decide each workload's isolation mode and expand replicas (units.py).
2. With a current plan, keep every replica that still fits where it is.
3. Place the rest in order: higher priority first, larger demand first, by name.
4. A replica that fits nowhere may evict lower-priority replicas (policy.preemption); evicted
   replicas go back in the queue and are placed elsewhere when they can.
5. What still does not fit is reported with the reasons, GPU by GPU.

The target is the spec's (Kubernetes when it writes a `kubernetes:` section, else host) unless the
caller names one. A Kubernetes target keeps every node to one sharing method for its full GPUs and
MPS off nodes with MIG (node_sharing.py), so that `gpuplex kube render` can run every plan it gets.
A host plan is made exactly as without the rule.

CPython's cyclic garbage collector is paused while a plan is made: a plan at fleet scale allocates
millions of objects that live until it is done and form no cycles, and the collector walked them
again and again, a third of the time at 100,000 workloads (bench/planner.py --scale 10).
"""

from __future__ import annotations

import gc
import heapq
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

from gpuplex.core.plan.assemble import assemble
from gpuplex.core.plan.demand import Key, Unit, size_on
from gpuplex.core.plan.diagnose import why_not_placed
from gpuplex.core.plan.index import Candidate, FleetIndex
from gpuplex.core.plan.inventory import GpuSlot, build_inventory
from gpuplex.core.plan.model import Infeasible, Mode, Placement, Plan, Preemption
from gpuplex.core.plan.node_sharing import target_of
from gpuplex.core.plan.occupancy import Hold, mode_problem, open_mig_starts, sharing_problem
from gpuplex.core.plan.preempt import Eviction, find_eviction
from gpuplex.core.plan.quota import QuotaLedger
from gpuplex.core.plan.units import build_units
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy
from gpuplex.core.spec.pools import pool_accepts
from gpuplex.core.target import Target

if TYPE_CHECKING:
    from gpuplex.core.plan.share_fragmentation import ShareFragmentation


def make_plan(
    spec: GpuplexSpec, current: Plan | None = None, *, target: Target | None = None
) -> Plan:
    with _collector_paused():
        return _make_plan(spec, current, target)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block, and back as it was after it (the cycles made
    meanwhile are collected then). Nested or in two threads at once, it ends on whenever it was on
    before the first."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _make_plan(spec: GpuplexSpec, current: Plan | None, target: Target | None) -> Plan:
    tenants = {tenant.name: tenant for tenant in spec.tenants}
    policy = spec.policy.placement
    # GPUs are ordered as binpack orders them under every policy but spread
    spread = policy is PlacementPolicy.SPREAD
    slots = build_inventory(spec.fleet, policy if spread else PlacementPolicy.BINPACK)
    decisions, units = build_units(spec, slots)
    share_fragmentation: ShareFragmentation | None = None
    if policy is PlacementPolicy.FRAGMENTATION:
        # numpy, which the fragmentation scores use, loads only when this policy plans
        from gpuplex.core.plan.share_fragmentation import ShareFragmentation

        share_fragmentation = ShareFragmentation(units, slots)
    index = FleetIndex(slots, policy, tenants, share_fragmentation, target or target_of(spec))
    run = _PlanRun(index, QuotaLedger(tenants))
    if current is not None:
        run.keep_current(units, current, slots)
    run.place_all(units, preemption=spec.policy.preemption)
    return assemble(
        policy=policy.value,
        index=run.index,
        holds=run.holds,
        reasons=run.reasons,
        decisions=decisions,
        infeasible=run.infeasible,
        preemptions=run.preemptions,
        current=current,
    )


class _PlanRun:
    """The working state of one planning run. Lives only inside make_plan."""

    def __init__(self, index: FleetIndex, ledger: QuotaLedger) -> None:
        self.index = index
        self.ledger = ledger
        self.holds: dict[Key, Hold] = {}
        self.reasons: dict[Key, str] = {}
        self.infeasible: list[Infeasible] = []
        self.preemptions: list[Preemption] = []
        self.evicted_by: dict[Key, str] = {}

    def _take(self, unit: Unit, candidate: Candidate, reason: str) -> None:
        self.holds[unit.key] = self.index.assign(unit, candidate)
        self.ledger.add(unit, candidate.sized)
        self.reasons[unit.key] = reason

    def _drop(self, hold: Hold) -> None:
        self.index.release(hold)
        self.ledger.remove(hold.unit, hold.sized)
        del self.holds[hold.unit.key]
        del self.reasons[hold.unit.key]

    def keep_current(self, units: list[Unit], current: Plan, slots: list[GpuSlot]) -> None:
        where = {(slot.node, slot.index): slot.gpu_id for slot in slots}
        previous = {(p.tenant, p.workload, p.replica): p for p in current.placements}
        for unit in units:
            placement = previous.get(unit.key)
            if placement is not None:
                candidate = self._same_spot(unit, placement, where)
                if candidate is not None:
                    self._take(unit, candidate, "kept where the current plan has it")

    def _same_spot(
        self, unit: Unit, placement: Placement, where: dict[tuple[str, int], int]
    ) -> Candidate | None:
        """The candidate at the placement's GPU(s) and slice, if it is still valid and free."""
        gpu_ids = tuple(where.get((placement.node, i), -1) for i in placement.gpu_indices)
        if (
            placement.mode is not unit.mode
            or -1 in gpu_ids
            or len(set(gpu_ids)) != len(gpu_ids)  # a hand-edited plan may repeat a GPU
            or len(gpu_ids) != unit.gpu_count
        ):
            return None
        states = [self.index.states[g] for g in gpu_ids]
        model = states[0].slot.model
        sized = size_on(unit, model)
        if (
            sized is None
            or placement.gpu_model != model.name
            or any(
                s.slot.model != model
                or not pool_accepts(s.slot.pool, unit.pool)
                or mode_problem(unit, s.slot) is not None
                for s in states
            )
            or self.ledger.problem(unit, sized) is not None
        ):
            return None
        if unit.mode is Mode.MIG:
            state, profile = states[0], sized.profile
            if (
                placement.mig is None
                or profile is None
                or profile.name != placement.mig.profile
                or state.mode not in (None, Mode.MIG)
                or placement.mig.start_slot not in open_mig_starts(state, profile)
                or sharing_problem(unit, state, self.index.tenants)
                or self.index.node_problem(unit, state.slot.node)
            ):
                return None
            return Candidate(gpu_ids, sized, placement.mig.start_slot, (0, 0, 0, (0, 0)), "")
        if all(isinstance(self.index.fit(unit, sized, s), int) for s in states):
            return Candidate(gpu_ids, sized, None, (0, 0, 0, (0, 0)), "")
        return None

    def place_all(self, units: list[Unit], *, preemption: bool) -> None:
        order = {unit.key: n for n, unit in enumerate(units)}
        queue = [(order[u.key], u.key) for u in units if u.key not in self.holds]
        by_key = {unit.key: unit for unit in units}
        heapq.heapify(queue)
        reasons_by_workload: dict[tuple[str, str], list[str]] = {}
        while queue:
            _, key = heapq.heappop(queue)
            unit = by_key[key]
            refuse = partial(self.ledger.problem, unit)
            candidate = self.index.search(unit, refuse)
            if candidate is not None:
                self._take(unit, candidate, self._why_here(unit, candidate))
                continue
            eviction = find_eviction(unit, self.index, self.ledger) if preemption else None
            if eviction is not None:
                self._evict(unit, eviction)
                for victim in eviction.left_out:
                    heapq.heappush(queue, (order[victim.unit.key], victim.unit.key))
                continue
            if key in self.evicted_by:
                self.preemptions.append(
                    Preemption(
                        tenant=key[0],
                        workload=key[1],
                        replica=key[2],
                        by=self.evicted_by[key],
                        reason=f"evicted for {self.evicted_by[key]} (higher priority); no room elsewhere",
                    )
                )
                continue
            workload = (key[0], key[1])
            if workload not in reasons_by_workload:
                reasons_by_workload[workload] = why_not_placed(unit, self.index, self.ledger)
            self.infeasible.append(
                Infeasible(
                    tenant=key[0],
                    workload=key[1],
                    replica=key[2],
                    reasons=reasons_by_workload[workload],
                )
            )

    def _evict(self, unit: Unit, eviction: Eviction) -> None:
        """Apply an eviction as find_eviction tried it: victims off, `unit` on, the victims that
        fit elsewhere moved there; the ones left out are the caller's to queue again."""
        victims = ", ".join(v.unit.label for v in eviction.victims)
        for victim in eviction.victims:
            self._drop(victim)
            self.evicted_by[victim.unit.key] = unit.label
        self._take(unit, eviction.candidate, f"preempted {victims} (lower priority)")
        for victim, spot in eviction.moved:
            self._take(victim.unit, spot, f"moved to make room for {unit.label}")

    def _why_here(self, unit: Unit, candidate: Candidate) -> str:
        return f"{self.index.policy_for(unit)}: {candidate.reason}"
