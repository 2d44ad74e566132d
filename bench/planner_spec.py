"""Planner benchmark, the input: a seeded fleet of N nodes x 8 H100-80GB and M mixed workloads.

`build_spec(options)` is deterministic: the same options give the same spec. `must_size` and
`gpu_share` (what one replica takes of a GPU) scale the replicas here; bench/planner.py and
bench/planner_bounds.py use them too.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, GpuModel
from gpuplex.core.plan import Mode
from gpuplex.core.plan.demand import Sized, Unit, size_on
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.units import build_units
from gpuplex.core.spec import GpuplexSpec

GPU_MODEL = "H100-80GB"
GPUS_PER_NODE = 8
BURSTY_NODE_SHARE = 0.30

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
    kubernetes: bool = True  # also plan for Kubernetes (many minutes at fleet scale)


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
    share = {(u.key[0], u.key[1]): gpu_share(u, must_size(u, model), model) for u in units}
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


def must_size(unit: Unit, model: GpuModel) -> Sized:
    """`size_on`, where None (the unit can never fit) means the generator is wrong."""
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
