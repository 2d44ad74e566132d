"""Planner benchmark, the yardsticks: the lower bound on GPUs, and a naive first-fit placer as
the speed and packing baseline for make_plan.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.planner_measure import Measured
from bench.planner_spec import must_size
from gpuplex.core.catalog import MPS_CLIENT_LIMIT, GpuModel
from gpuplex.core.plan import Mode
from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.inventory import GpuSlot
from gpuplex.core.spec import GpuplexSpec, Requirement

# ---------------------------------------------------------------------------------------------------
# The lower bound on GPUs.


@dataclass
class _Demand:
    whole_gpus: int = 0
    mig_memory_slices: int = 0
    mig_compute_slices: int = 0
    mig_slot0_only: int = 0  # profiles whose only valid start is slot 0 (4g, 7g): one per GPU
    memory_mib: int = 0
    threads: int = 0
    clients: int = 0


def lower_bound(units: Sequence[Unit], model: GpuModel) -> tuple[int, dict[str, int]]:
    """Fewest GPUs that could hold the units, whatever the placer: a GPU serves one pool and one
    isolation mode, so the bound is a sum over (pool, mode) of the most of, per resource,
    ceil(total demand / what one GPU has):

    - dedicated: the GPUs asked for;
    - MIG: memory slices / 8, compute slices / 7, and the count of profiles that only start at slot
      0 (4g.40gb, 7g.80gb), since no two of them share a GPU;
    - MPS: memory / GPU memory, thread % / 100, clients / 48 (the MPS client limit);
    - time-slicing: memory / GPU memory.

    Co-tenancy rules (exclusive_gpus, never_share_with) are left out, so the bound stays a bound.
    """
    demand: dict[tuple[str | None, Mode], _Demand] = {}
    for unit in units:
        sized = must_size(unit, model)
        d = demand.setdefault((unit.pool, unit.mode), _Demand())
        if unit.mode is Mode.DEDICATED:
            d.whole_gpus += unit.gpu_count
        elif unit.mode is Mode.MIG and sized.profile is not None:
            d.mig_memory_slices += sized.profile.memory_slices
            d.mig_compute_slices += sized.profile.compute_slices
            d.mig_slot0_only += 1 if sized.profile.starts == (0,) else 0
        else:
            d.memory_mib += sized.memory_mib
            d.threads += sized.thread_percent or 0
            d.clients += 1
    by_mode: Counter[str] = Counter()
    for (_, mode), d in demand.items():
        by_mode[mode.value] += _bound_of(mode, d, model)
    return sum(by_mode.values()), dict(sorted(by_mode.items()))


def _bound_of(mode: Mode, d: _Demand, model: GpuModel) -> int:
    if mode is Mode.DEDICATED:
        return d.whole_gpus
    if mode is Mode.MIG:
        geometry = model.mig
        if geometry is None:
            raise ValueError(f"{model.name} has no MIG")
        return max(
            math.ceil(d.mig_memory_slices / geometry.memory_slices),
            math.ceil(d.mig_compute_slices / geometry.compute_slices),
            d.mig_slot0_only,
        )
    memory = math.ceil(d.memory_mib / model.memory_mib)
    if mode is Mode.MPS:
        return max(memory, math.ceil(d.threads / 100), math.ceil(d.clients / MPS_CLIENT_LIMIT))
    return memory


# ---------------------------------------------------------------------------------------------------
# Baseline: naive first fit.


@dataclass(slots=True)
class _NaiveGpu:
    node: str
    pool: str | None
    mode: Mode | None = None
    memory_used_mib: int = 0
    threads_used: int = 0
    mig_mask: int = 0
    mig_compute: int = 0
    mig_counts: Counter[str] = field(default_factory=Counter)
    tenants: Counter[str] = field(default_factory=Counter)


class _NaiveFirstFit:
    """Walk the GPUs in fleet order and take the first one where the replica fits: by mode, memory,
    threads, clients, MIG slots (the lowest free start) and the co-tenancy rules. No index, no
    scoring."""

    def __init__(self, spec: GpuplexSpec, slots: Sequence[GpuSlot]) -> None:
        self.gpus = [_NaiveGpu(slot.node, slot.pool) for slot in slots]
        self.model = slots[0].model
        self.by_node: dict[str, list[_NaiveGpu]] = {}
        for gpu in self.gpus:
            self.by_node.setdefault(gpu.node, []).append(gpu)
        self.exclusive = {t.name for t in spec.tenants if t.exclusive_gpus}
        self.hard = {t.name for t in spec.tenants if t.effective_requirement is Requirement.HARD}
        self.apart: set[tuple[str, str]] = set()
        for tenant in spec.tenants:
            for other in tenant.never_share_with:
                self.apart |= {(tenant.name, other), (other, tenant.name)}

    def place(self, unit: Unit, sized: Sized) -> bool:
        if unit.mode is Mode.DEDICATED:
            return self._dedicated(unit)
        for gpu in self.gpus:
            if (gpu.pool is None or gpu.pool == unit.pool) and gpu.mode in (None, unit.mode):
                if unit.mode is Mode.MIG:
                    if self._mig(unit, sized, gpu):
                        return True
                elif self._share(unit, sized, gpu):
                    return True
        return False

    def _shares_ok(self, unit: Unit, gpu: _NaiveGpu) -> bool:
        me = unit.tenant.name
        others = [name for name in gpu.tenants if name != me]
        if not others:
            return True
        if me in self.exclusive:
            return False
        hard = unit.mode is not Mode.MIG and me in self.hard
        for other in others:
            if other in self.exclusive or (me, other) in self.apart:
                return False
            if hard or (unit.mode is not Mode.MIG and other in self.hard):
                return False
        return True

    def _take(self, unit: Unit, gpu: _NaiveGpu) -> None:
        gpu.mode = unit.mode
        gpu.tenants[unit.tenant.name] += 1

    def _dedicated(self, unit: Unit) -> bool:
        for gpus in self.by_node.values():
            free = [g for g in gpus if not g.tenants and (g.pool is None or g.pool == unit.pool)]
            if len(free) >= unit.gpu_count:
                for gpu in free[: unit.gpu_count]:
                    self._take(unit, gpu)
                return True
        return False

    def _mig(self, unit: Unit, sized: Sized, gpu: _NaiveGpu) -> bool:
        profile, geometry = sized.profile, self.model.mig
        if profile is None or geometry is None:
            return False
        if gpu.mig_compute + profile.compute_slices > geometry.compute_slices:
            return False
        if gpu.mig_counts[profile.name] >= profile.max_count or not self._shares_ok(unit, gpu):
            return False
        for start in profile.starts:
            bits = ((1 << profile.memory_slices) - 1) << start
            if not gpu.mig_mask & bits:
                gpu.mig_mask |= bits
                gpu.mig_compute += profile.compute_slices
                gpu.mig_counts[profile.name] += 1
                self._take(unit, gpu)
                return True
        return False

    def _share(self, unit: Unit, sized: Sized, gpu: _NaiveGpu) -> bool:
        if gpu.memory_used_mib + sized.memory_mib > self.model.memory_mib:
            return False
        threads = sized.thread_percent or 0
        if unit.mode is Mode.MPS and (
            gpu.threads_used + threads > 100 or gpu.tenants.total() >= MPS_CLIENT_LIMIT
        ):
            return False
        if not self._shares_ok(unit, gpu):
            return False
        gpu.memory_used_mib += sized.memory_mib
        gpu.threads_used += threads
        self._take(unit, gpu)
        return True


def naive_first_fit(
    spec: GpuplexSpec, slots: Sequence[GpuSlot], units: Sequence[Unit], limit_s: float
) -> Measured:
    """Place `units` in the order given; stop at `limit_s` seconds (then `finished` is False)."""
    sized = [must_size(unit, slots[0].model) for unit in units]
    placer = _NaiveFirstFit(spec, slots)
    started = time.perf_counter()
    placed = unplaced = 0
    for unit, demand in zip(units, sized, strict=True):
        if time.perf_counter() - started > limit_s:
            break
        if placer.place(unit, demand):
            placed += 1
        else:
            unplaced += 1
    return Measured(
        placer="baseline: first fit",
        seconds=[time.perf_counter() - started],
        finished=placed + unplaced == len(units),
        placed=placed,
        not_placed=len(units) - placed,
        gpus_used=sum(1 for gpu in placer.gpus if gpu.tenants),
    )
