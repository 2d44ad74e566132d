"""Weighted Dominant Resource Fairness (Ghodsi et al., NSDI 2011) by progressive filling.

Two forms: `drf_allocate` over whole tasks (the paper's), and `fill_by_drf` over divisible
demands (what quota queues share out), plus the resource-vector arithmetic both use.

A tenant's dominant share is the largest fraction of any one resource it holds. DRF hands out
tasks one at a time, always to the tenant whose dominant share divided by its weight is lowest,
until nobody's next task fits. That equalises weighted dominant shares as far as whole tasks
allow, and no tenant can gain by lying about its demand (the paper's strategy-proofness).

Resource names are free strings ("cpu", "memory_mib", "gpu_milli", ...): a resource a task asks
for that the capacity does not name has capacity 0, so that task never fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

#: amounts of named resources: {"cpu": 9, "memory_gb": 18}
Resources = Mapping[str, float]

#: slack for float sums, so that a capacity filled exactly counts as filled
EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class DrfTenant:
    """One tenant's per-task demand, its weight, and how many tasks it has (None: unbounded)."""

    name: str
    task_demand: Resources
    weight: float = 1.0
    max_tasks: int | None = None


@dataclass(frozen=True, slots=True)
class DrfAllocation:
    """How many tasks each tenant got, each tenant's (unweighted) dominant share, and the order."""

    tasks: Mapping[str, int]
    dominant_shares: Mapping[str, float]
    used: Resources
    #: tenant names in the order their tasks were granted (the paper's Table 2 "schedule")
    schedule: tuple[str, ...]


def dominant_share(usage: Resources, capacity: Resources) -> float:
    """The largest fraction of any resource `usage` holds; a resource of capacity 0 is skipped."""
    return max(
        (amount / capacity[name] for name, amount in usage.items() if capacity.get(name, 0) > 0),
        default=0.0,
    )


def fits(demand: Resources, free: Resources) -> bool:
    """Whether `demand` fits in `free`, resource by resource (a missing resource is 0)."""
    return all(amount <= free.get(name, 0.0) + EPSILON for name, amount in demand.items())


def drf_allocate(capacity: Resources, tenants: Sequence[DrfTenant]) -> DrfAllocation:
    """Progressive filling: grant one task at a time to the lowest weighted dominant share.

    Ties go to the tenant listed first. A tenant drops out when its next task no longer fits or it
    has no tasks left (its demand ran out); the others keep filling what it leaves.
    """
    _check(tenants)
    free = {name: float(amount) for name, amount in capacity.items()}
    tasks = {tenant.name: 0 for tenant in tenants}
    shares = {tenant.name: 0.0 for tenant in tenants}
    schedule: list[str] = []
    active = [t for t in tenants if t.max_tasks != 0]
    while active:
        tenant = min(active, key=lambda t: shares[t.name] / t.weight)
        if not fits(tenant.task_demand, free):
            active.remove(tenant)
            continue
        for name, amount in tenant.task_demand.items():
            free[name] = free.get(name, 0.0) - amount
        tasks[tenant.name] += 1
        held = {name: amount * tasks[tenant.name] for name, amount in tenant.task_demand.items()}
        shares[tenant.name] = dominant_share(held, capacity)
        schedule.append(tenant.name)
        if tasks[tenant.name] == tenant.max_tasks:
            active.remove(tenant)
    used = {name: capacity[name] - free.get(name, 0.0) for name in capacity}
    return DrfAllocation(tasks, shares, used, tuple(schedule))


def _check(tenants: Sequence[DrfTenant]) -> None:
    """Refuse input progressive filling cannot finish on (a free task would be granted forever)."""
    names = [tenant.name for tenant in tenants]
    if len(set(names)) != len(names):
        raise ValueError(f"tenant names must be unique, got {names}")
    for tenant in tenants:
        if tenant.weight <= 0:
            raise ValueError(f"tenant {tenant.name}: weight must be > 0, got {tenant.weight}")
        if any(amount < 0 for amount in tenant.task_demand.values()):
            raise ValueError(f"tenant {tenant.name}: a task cannot demand a negative amount")
        if tenant.max_tasks is None and not any(tenant.task_demand.values()):
            raise ValueError(f"tenant {tenant.name}: a task demanding nothing needs max_tasks")


def split_by_drf(
    free: Resources,
    wants: Mapping[str, Resources],
    weights: Mapping[str, float],
    capacity: Resources,
) -> dict[str, Resources]:
    """Divide `free` among divisible `wants` by weighted DRF with fixed weights (one level)."""
    return fill_by_drf(wants, [(frozenset(wants), free)], lambda _: weights, capacity)


def fill_by_drf(
    wants: Mapping[str, Resources],
    pools: Sequence[tuple[frozenset[str], Resources]],
    weights: Callable[[set[str]], Mapping[str, float]],
    capacity: Resources,
) -> dict[str, Resources]:
    """Continuous progressive filling: everyone grows along its own want vector, its dominant
    share (against the whole `capacity`) rising at the rate of its weight among those growing.

    A pool is an amount some claimants draw on together (the free capacity; a team's limit or spare guarantee). A
    claimant stops when its want is met or a pool it draws on runs out of a resource it needs;
    the rest keep growing, with the weights worked out again among them.
    """
    dominant = {name: dominant_share(want, capacity) for name, want in wants.items()}
    filled = dict.fromkeys(wants, 0.0)  # the fraction of each want granted so far
    left = [dict(amount) for _, amount in pools]
    growing = {name for name in wants if dominant[name] > EPSILON}
    while growing:
        weight = weights(growing)
        rate = {name: weight[name] / dominant[name] for name in growing}
        draws = [
            {
                r: sum(rate[n] * wants[n].get(r, 0.0) for n in growing & members)
                for r in {r for n in growing & members for r in wants[n]}
            }
            for members, _ in pools
        ]
        step = min(
            [(1.0 - filled[name]) / rate[name] for name in growing]
            + [
                max(left[i].get(r, 0.0), 0.0) / speed
                for i, draw in enumerate(draws)
                for r, speed in draw.items()
                if speed > 0
            ]
        )
        for name in growing:
            filled[name] = min(1.0, filled[name] + step * rate[name])
        blocked: set[str] = set()
        for i, draw in enumerate(draws):
            for r, speed in draw.items():
                left[i][r] = left[i].get(r, 0.0) - step * speed
                if speed > 0 and left[i][r] <= EPSILON:
                    blocked |= {n for n in pools[i][0] if wants[n].get(r, 0.0) > 0}
        growing = {n for n in growing - blocked if filled[n] < 1.0 - EPSILON}
    return {name: scale(want, filled[name]) for name, want in wants.items()}


def positive(amount: Resources) -> dict[str, float]:
    """The resources of `amount` above zero (float dust of a subtraction dropped)."""
    return {name: value for name, value in amount.items() if value > EPSILON}


def add(*amounts: Resources) -> dict[str, float]:
    total: dict[str, float] = {}
    for amount in amounts:
        for name, value in amount.items():
            total[name] = total.get(name, 0.0) + value
    return total


def subtract(left: Resources, right: Resources) -> dict[str, float]:
    return {name: left.get(name, 0.0) - right.get(name, 0.0) for name in {*left, *right}}


def clamp(amount: Resources, ceiling: Resources) -> dict[str, float]:
    """`amount` capped resource by resource by `ceiling` (a resource `ceiling` lacks is 0)."""
    return {name: min(value, ceiling.get(name, 0.0)) for name, value in amount.items()}


def scale(amount: Resources, factor: float) -> dict[str, float]:
    return {name: value * factor for name, value in amount.items()}
