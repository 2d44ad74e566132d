"""Planner benchmark: `make_plan` on a seeded fleet of N nodes x 8 H100-80GB and M mixed workloads.

    .venv/bin/python bench/planner.py [--nodes 1000] [--workloads 10000] [--seed 1] [--json]

The fleet and the workloads are built in memory from the seed, so every run plans the same input.
Nodes are split 70 % long-running / 30 % bursty; about 200 tenants of every tier ask for whole GPUs
(1, 2, 4, 8), explicit MIG profiles, memory-sized MIG slices, MPS shares and time-slice shares. Replica
counts are scaled per pool so that the demand is about `--fill` (78 %) of the fleet: the benchmark
measures placement speed and packing quality, not infeasibility.

Measured, all in this one run (house rule 8):
- make_plan with policy binpack, best of 3 fresh calls (all 3 shown): wall time, placements/s, GPUs used;
- the lower bound on GPUs: per pool and isolation mode, the most of ceil(demand / per-GPU capacity)
  over each resource (see `lower_bound`); GPUs used / lower bound is the packing ratio;
- baselines: a naive first-fit placer written here (speed and packing), and make_plan with policy
  spread (packing), over the same replicas in the same order.

Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import platform
import pstats
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, GpuModel
from gpuplex.core.plan import Mode, make_plan
from gpuplex.core.plan.demand import Sized, Unit, size_on
from gpuplex.core.plan.inventory import GpuSlot, build_inventory
from gpuplex.core.plan.units import build_units
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy, Requirement

GPU_MODEL = "H100-80GB"
GPUS_PER_NODE = 8
BURSTY_NODE_SHARE = 0.30
TARGET_S = 10.0  # the issue's target for 1,000 nodes x 8 H100 and 10,000 workloads

# (value, weight) tables of what workloads ask for.
WHOLE_GPUS = ((1, 55), (2, 25), (4, 12), (8, 8))
MIG_PROFILES = (
    ("1g.10gb", 30),
    ("1g.20gb", 20),
    ("2g.20gb", 15),
    ("3g.40gb", 20),
    ("4g.40gb", 8),
    ("7g.80gb", 7),
)
MIG_MEMORY_GIB = (4, 8, 10, 16, 20, 24, 32, 40, 60)  # the planner picks the smallest profile
MPS_MEMORY_GIB = (2, 4, 6, 8, 12, 16, 24)
MPS_COMPUTE_PERCENT = (5, 10, 15, 20, 25, 30, 40, 50)
TIMESLICE_MEMORY_GIB = (1, 2, 4, 8, 12, 16)

# Tenant classes: share of the tenants, and the tenant fields that make the class.
TENANT_CLASSES: tuple[tuple[str, float], ...] = (
    ("premium", 0.10),  # dedicated GPUs (the planner's rule for the premium tier), half exclusive
    ("standard", 0.45),  # strong requirement by tier: MIG slices, or whole GPUs when asked
    ("regulated", 0.10),  # hard requirement: MIG; never next to two other standard tenants
    ("moderate", 0.10),  # standard tier, requirement moderate: MPS shares
    ("free", 0.20),  # free tier: MPS shares
    ("shared", 0.05),  # requirement shared: time-slicing
)

# Request forms: weight among workloads, and the tenant classes that ask for them.
REQUEST_FORMS: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("whole-gpus", 12, ("premium", "standard", "regulated")),
    ("premium-memory", 3, ("premium",)),
    ("mig-profile", 25, ("standard", "regulated")),
    ("mig-memory", 15, ("standard", "regulated")),
    ("mps", 30, ("moderate", "free")),
    ("timeslice", 15, ("shared",)),
)


@dataclass(frozen=True)
class Options:
    nodes: int = 1000
    workloads: int = 10000
    tenants: int = 200
    seed: int = 1
    fill: float = 0.78
    runs: int = 3
    naive_limit_s: float = 300.0


# ---------------------------------------------------------------------------------------------------
# The input: a seeded fleet and workload mix.


def _weighted(rng: random.Random, table: Sequence[tuple[Any, int]]) -> Any:
    values = [value for value, _ in table]
    weights = [weight for _, weight in table]
    return rng.choices(values, weights=weights)[0]


def _tenants(options: Options, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """Tenant dicts (without workloads) by class."""
    by_class: dict[str, list[dict[str, Any]]] = {}
    counts = {name: max(1, round(share * options.tenants)) for name, share in TENANT_CLASSES}
    standard_names = [f"standard-{i:03d}" for i in range(counts["standard"])]
    for name, _ in TENANT_CLASSES:
        tenants: list[dict[str, Any]] = []
        for i in range(counts[name]):
            tenant: dict[str, Any] = {"name": f"{name}-{i:03d}", "workloads": []}
            if name == "premium":
                tenant |= {"tier": "premium", "priority": rng.choice((90, 100))}
                tenant["exclusive_gpus"] = i % 2 == 0
            elif name == "standard":
                tenant |= {"tier": "standard", "priority": rng.randint(40, 60)}
            elif name == "regulated":
                avoid = rng.sample(standard_names, k=min(2, len(standard_names)))
                tenant |= {"tier": "standard", "regulated": True, "priority": 70}
                tenant["never_share_with"] = avoid
            elif name == "moderate":
                tenant |= {"tier": "standard", "requirement": "moderate", "priority": 30}
            elif name == "free":
                tenant |= {"tier": "free", "priority": rng.randint(0, 10)}
            else:
                tenant |= {"tier": "free", "requirement": "shared", "priority": 5}
            tenants.append(tenant)
        by_class[name] = tenants
    return by_class


def _gpu_request(form: str, rng: random.Random) -> tuple[dict[str, Any], str]:
    """(gpu request, workload kind) for one request form."""
    if form == "whole-gpus":
        count = _weighted(rng, WHOLE_GPUS)
        return {"count": count}, "training" if count >= 4 else rng.choice(("inference", "batch"))
    if form == "premium-memory":
        return {"memory_gib": rng.choice((24, 40, 60, 75))}, "inference"
    if form == "mig-profile":
        return {"mig_profile": _weighted(rng, MIG_PROFILES)}, rng.choice(("inference", "batch"))
    if form == "mig-memory":
        request: dict[str, Any] = {"memory_gib": rng.choice(MIG_MEMORY_GIB)}
        if rng.random() < 0.2:
            request["compute_percent"] = rng.choice((30, 40))
        return request, rng.choice(("inference", "batch"))
    if form == "mps":
        request = {
            "memory_gib": rng.choice(MPS_MEMORY_GIB),
            "compute_percent": rng.choice(MPS_COMPUTE_PERCENT),
        }
        return request, rng.choice(("inference", "notebook"))
    return {"memory_gib": rng.choice(TIMESLICE_MEMORY_GIB)}, rng.choice(("inference", "notebook"))


def _fleet(options: Options) -> dict[str, Any]:
    long_running = options.nodes - round(options.nodes * BURSTY_NODE_SHARE)
    return {
        "nodes": [
            {
                "name": f"node-{i:04d}",
                "pool": "long-running" if i < long_running else "bursty",
                "gpus": [{"model": GPU_MODEL, "count": GPUS_PER_NODE}],
            }
            for i in range(options.nodes)
        ]
    }


def build_spec(options: Options) -> GpuplexSpec:
    """The seeded spec: same options, same spec. Replicas are scaled per pool to `options.fill`."""
    rng = random.Random(options.seed)
    by_class = _tenants(options, rng)
    forms = [(form, weight) for form, weight, _ in REQUEST_FORMS]
    eligible = {form: classes for form, _, classes in REQUEST_FORMS}
    workloads: list[tuple[dict[str, Any], dict[str, Any]]] = []  # (tenant, workload)
    for n in range(options.workloads):
        form = _weighted(rng, forms)
        tenant = rng.choice([t for c in eligible[form] for t in by_class[c]])
        gpu, kind = _gpu_request(form, rng)
        pattern = "bursty" if rng.random() < BURSTY_NODE_SHARE else "long-running"
        workloads.append(
            (tenant, {"name": f"w{n:05d}", "kind": kind, "pattern": pattern, "gpu": gpu})
        )

    def spec_now() -> GpuplexSpec:
        for tenants in by_class.values():
            for tenant in tenants:
                tenant["workloads"] = []
        for tenant, workload in workloads:
            tenant["workloads"].append(workload)
        tenants = [tenant for group in by_class.values() for tenant in group]
        return GpuplexSpec.model_validate({"fleet": _fleet(options), "tenants": tenants})

    # One replica each first, to learn what each workload costs on this fleet; then scale.
    probe = spec_now()
    slots = build_inventory(probe.fleet, probe.policy.placement)
    _, units = build_units(probe, slots)
    model = slots[0].model
    share = {(u.key[0], u.key[1]): gpu_share(u, _sized(u, model), model) for u in units}
    capacity = Counter(slot.pool for slot in slots)
    asked: dict[str | None, float] = {}
    for unit in units:
        asked[unit.pool] = asked.get(unit.pool, 0.0) + share[(unit.key[0], unit.key[1])]
    per_pool = {pool: options.fill * capacity[pool] / asked[pool] for pool in asked}
    for _, workload in workloads:
        mean = per_pool.get(workload["pattern"], 1.0)
        whole = math.floor(mean)
        workload["replicas"] = max(1, whole + (1 if rng.random() < mean - whole else 0))
    return spec_now()


def _sized(unit: Unit, model: GpuModel) -> Sized:
    sized = size_on(unit, model)
    if sized is None:
        raise ValueError(f"{unit.label} can never fit a {model.name}: the generator is wrong")
    return sized


def gpu_share(unit: Unit, sized: Sized, model: GpuModel) -> float:
    """What one replica takes of a GPU: its largest fraction over the GPU's limited resources."""
    if unit.mode is Mode.DEDICATED:
        return float(unit.gpu_count)
    if unit.mode is Mode.MIG and sized.profile is not None and model.mig is not None:
        return max(
            sized.profile.memory_slices / model.mig.memory_slices,
            sized.profile.compute_slices / model.mig.compute_slices,
        )
    memory = sized.memory_mib / model.memory_mib
    if unit.mode is Mode.MPS:
        return max(memory, (sized.thread_percent or 0) / 100, 1 / MPS_CLIENT_LIMIT)
    return memory


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
        sized = _sized(unit, model)
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
    sized = [_sized(unit, slots[0].model) for unit in units]
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


# ---------------------------------------------------------------------------------------------------
# Measuring.


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    python: str
    platform: str


@dataclass(frozen=True)
class Input:
    nodes: int
    gpus: int
    gpus_by_pool: dict[str, int]
    tenants: int
    workloads: int
    replicas: int
    replicas_by_mode: dict[str, int]
    demand_gpus: float  # sum of gpu_share over the replicas
    fill: float  # demand_gpus / gpus
    lower_bound: int
    lower_bound_by_mode: dict[str, int]


@dataclass(frozen=True)
class Measured:
    placer: str
    seconds: list[float]  # every run; the best counts
    finished: bool  # False: the naive baseline stopped at its time limit
    placed: int
    not_placed: int
    gpus_used: int

    @property
    def best_s(self) -> float:
        return min(self.seconds)


@dataclass(frozen=True)
class Results:
    machine: Machine
    input: Input
    runs: list[Measured]  # make_plan binpack first, then the baselines
    target_s: float | None  # set at the issue's size (1,000 nodes, 10,000 workloads)

    def as_json(self) -> dict[str, Any]:
        first, bound = self.runs[0], self.input.lower_bound
        runs = [
            asdict(m)
            | {
                "best_s": m.best_s,
                "placements_per_s": m.placed / m.best_s,
                "used_over_lower_bound": m.gpus_used / bound,
                "time_over_make_plan": m.best_s / first.best_s,
                "gpus_over_make_plan": m.gpus_used / first.gpus_used,
            }
            for m in self.runs
        ]
        target = {"target_s": self.target_s, "target_met": first.best_s < (self.target_s or 0)}
        return {"machine": asdict(self.machine), "input": asdict(self.input), "runs": runs} | (
            target if self.target_s is not None else {}
        )


def machine() -> Machine:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            names = [
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            ]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return Machine(
        cpu=cpu,
        cores=os.cpu_count() or 1,
        python=f"{platform.python_implementation()} {platform.python_version()}",
        platform=platform.platform(terse=True),
    )


def _time_make_plan(placer: str, spec: GpuplexSpec, runs: int) -> Measured:
    """`runs` fresh make_plan calls on the same spec."""
    seconds: list[float] = []
    for _ in range(runs):
        started = time.perf_counter()
        plan = make_plan(spec)
        seconds.append(time.perf_counter() - started)
    summary = plan.summary
    return Measured(
        placer=placer,
        seconds=seconds,
        finished=True,
        placed=summary.replicas_placed,
        not_placed=summary.replicas_infeasible + summary.preemptions,
        gpus_used=summary.gpus_used,
    )


def run(options: Options) -> Results:
    spec = build_spec(options)
    slots = build_inventory(spec.fleet, spec.policy.placement)
    _, units = build_units(spec, slots)  # the planner's own modes, demands and order
    model = slots[0].model
    bound, bound_by_mode = lower_bound(units, model)
    demand = sum(gpu_share(unit, _sized(unit, model), model) for unit in units)
    about = Input(
        nodes=options.nodes,
        gpus=len(slots),
        gpus_by_pool=dict(sorted(Counter(str(slot.pool) for slot in slots).items())),
        tenants=len(spec.tenants),
        workloads=sum(len(t.workloads) for t in spec.tenants),
        replicas=len(units),
        replicas_by_mode=dict(sorted(Counter(unit.mode.value for unit in units).items())),
        demand_gpus=round(demand, 1),
        fill=round(demand / len(slots), 3),
        lower_bound=bound,
        lower_bound_by_mode=bound_by_mode,
    )
    binpack = _time_make_plan("make_plan, binpack", spec, options.runs)
    spread_policy = spec.policy.model_copy(update={"placement": PlacementPolicy.SPREAD})
    spread_spec = spec.model_copy(update={"policy": spread_policy})
    spread = _time_make_plan("baseline: spread", spread_spec, 1)
    naive = naive_first_fit(spec, slots, units, options.naive_limit_s)
    issue_size = options.nodes == 1000 and options.workloads == 10000
    return Results(machine(), about, [binpack, spread, naive], TARGET_S if issue_size else None)


# ---------------------------------------------------------------------------------------------------
# Output.


def print_tables(results: Results, console: Console) -> None:
    m, w = results.machine, results.input
    about = Table(title="gpuplex planner benchmark: machine and input", title_justify="left")
    about.add_column("")
    about.add_column("")
    modes = ", ".join(f"{mode} {n:,}" for mode, n in w.replicas_by_mode.items())
    bounds = ", ".join(f"{mode} {n:,}" for mode, n in w.lower_bound_by_mode.items())
    for name, value in (
        ("CPU", f"{m.cpu}, {m.cores} cores"),
        ("Python", f"{m.python} on {m.platform}"),
        ("fleet", f"{w.nodes:,} nodes x {GPUS_PER_NODE} {GPU_MODEL} = {w.gpus:,} GPUs"),
        ("pools", ", ".join(f"{pool} {n:,} GPUs" for pool, n in w.gpus_by_pool.items())),
        ("tenants / workloads", f"{w.tenants:,} / {w.workloads:,}"),
        ("replicas", f"{w.replicas:,} ({modes})"),
        ("demand", f"{w.demand_gpus:,.1f} GPUs = {w.fill:.1%} of the fleet"),
        ("lower bound", f"{w.lower_bound:,} GPUs ({bounds})"),
    ):
        about.add_row(name, value)
    console.print(about)

    table = Table(title="placement: time and packing", title_justify="left")
    for n, column in enumerate(PLACEMENT_COLUMNS):
        table.add_column(column, justify="left" if n == 0 else "right")
    for row in results.as_json()["runs"]:
        runs = " / ".join(f"{x:.3f}" for x in row["seconds"])
        best = f"{row['best_s']:.3f}" + ("" if row["finished"] else " (stopped at the limit)")
        table.add_row(
            row["placer"],
            runs,
            best,
            f"{row['placements_per_s']:,.0f}",
            f"{row['placed']:,}",
            f"{row['not_placed']:,}",
            f"{row['gpus_used']:,}",
            f"{row['used_over_lower_bound']:.3f}",
            f"{row['time_over_make_plan']:.2f}x",
            f"{row['gpus_over_make_plan']:.3f}x",
        )
    console.print(table)
    console.print(NOTES)
    first = results.runs[0]
    if results.target_s is not None:
        verdict = "met" if first.best_s < results.target_s else "MISSED"
        console.print(
            f"Target: make_plan under {results.target_s:.0f} s at 1,000 nodes x 8 GPUs and "
            f"10,000 workloads: {verdict} (best {first.best_s:.2f} s)."
        )


PLACEMENT_COLUMNS = (
    "placer",
    "runs (s)",
    "best (s)",
    "placements/s",
    "placed",
    "not placed",
    "GPUs used",
    "used / bound",
    "time vs binpack",
    "GPUs vs binpack",
)

NOTES = """\
make_plan, binpack: spec in, Plan value out (mode choice, ordering, placement, Plan assembly), fresh calls.
baseline: spread: make_plan on the same spec with policy.placement spread (preemption as in the spec), one run.
baseline: first fit: naive first fit written in this script: the placement loop only, over the planner's own
  replicas in the planner's order (priority, then largest first); each replica takes the first GPU in fleet
  order where it fits, MIG at the lowest free start; no index, no scoring.
not placed: infeasible or preempted. used / bound: GPUs used over the lower bound.
time vs binpack: best seconds over make_plan binpack's best; GPUs vs binpack: GPUs used over binpack's."""


def profile_make_plan(spec: GpuplexSpec, top: int, console: Console) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    make_plan(spec)
    profiler.disable()
    console.print(f"cProfile of one make_plan call (binpack), top {top} by cumulative time:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(top)


def parse_options(argv: Sequence[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    defaults = Options()
    add = parser.add_argument
    add("--nodes", type=int, default=defaults.nodes, help="nodes of 8 H100-80GB")
    add("--workloads", type=int, default=defaults.workloads)
    add("--tenants", type=int, default=defaults.tenants)
    add("--seed", type=int, default=defaults.seed)
    add("--fill", type=float, default=defaults.fill, help="demand as a share of the fleet")
    add("--runs", type=int, default=defaults.runs, help="make_plan runs; the best counts")
    add("--naive-limit-s", type=float, default=defaults.naive_limit_s, help="naive time limit")
    add("--json", action="store_true", help="print the results as JSON")
    add("--profile", type=int, default=0, metavar="N", help="also print cProfile's top N")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.workloads < 1 or args.tenants < len(TENANT_CLASSES):
        parser.error(f"need nodes >= 1, workloads >= 1 and tenants >= {len(TENANT_CLASSES)}")
    if not 0 < args.fill <= 1 or args.runs < 1:
        parser.error("need 0 < fill <= 1 and runs >= 1")
    fields = ("nodes", "workloads", "tenants", "seed", "fill", "runs", "naive_limit_s")
    return Options(**{name: getattr(args, name) for name in fields}), args


def main(argv: Sequence[str] | None = None) -> int:
    options, args = parse_options(argv)
    results = run(options)
    if args.json:
        print(json.dumps(results.as_json(), indent=2))
        return 0
    console = Console() if sys.stdout.isatty() else Console(width=200)
    print_tables(results, console)
    if args.profile:
        profile_make_plan(build_spec(options), args.profile, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
