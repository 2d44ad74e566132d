"""Why a workload is pending: which quota or resource blocks it, and what would have to change.

`why_pending` looks at one pending workload against the queue tree (`queues.py`), what runs now
and the capacity, and checks in the order things really block:

1. the tenant's own limit, then each ancestor's (a hard bound: only own work finishing or a
   higher limit helps), then the whole cluster's capacity;
2. whether the ask fits the free capacity, and then, with `node_free`, one node's free capacity;
3. a claim inside the tenant's own guarantee may preempt borrowed work: `reclaim` itself decides
   (so the answer never disagrees with it), and a refusal is told apart into "wait for a victim's
   minimum runtime" and "preempting cannot free enough";
4. a claim beyond the guarantee only borrows idle capacity, never preempts; its fair share (from
   `fair_shares`, each tenant demanding what it holds, the claimant that plus the ask) says
   whether the ask would also take it past what is fair.

The first block found is the answer; the others follow in `also`. Every number is about the
answer's `queue` and `resource`: what the queue holds now, what the workload asks, and the bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from gpuplex.core.queues.drf import EPSILON, Resources, add, fits, subtract
from gpuplex.core.queues.hierarchy import (
    Queue,
    ReclaimPlan,
    RunningWorkload,
    fair_shares,
    reclaim,
    usage_by_tenant,
)

#: answers under which the workload starts now (after the listed preemptions, for "preempts")
STARTS: Final = frozenset({"schedulable", "preempts"})
#: every code an answer can carry, in the order the checks run
CODES: Final = (
    "unknown_tenant",
    "limit",
    "ancestor_limit",
    "exceeds_capacity",
    "no_node_fits",
    "reclaim_waits_min_runtime",
    "reclaim_not_enough",
    "no_idle_capacity_to_borrow",
    "fair_share_exceeded",
    "preempts",
    "schedulable",
)


@dataclass(frozen=True, slots=True)
class PendingWorkload:
    """A workload waiting to start: whose it is, what it asks for, and its priority."""

    name: str
    tenant: str
    resources: Resources
    #: kept for callers that rank pending work; it entitles to nothing here: only a claim
    #: inside the tenant's own guarantee preempts, whatever its priority
    priority: int = 0


@dataclass(frozen=True, slots=True)
class PendingAnswer:
    """Why a workload is pending (or that it is not), in words and in numbers.

    `code` is stable and machine-readable (one of `CODES`). `used`, `asked` and `bound` are
    amounts of `resource` for `queue`: what it holds now, what the workload asks, and the bound
    it meets (a limit, the capacity, a guarantee, a fair share, one node's free amount); None
    where the answer names no resource.
    """

    code: str
    queue: str
    resource: str | None
    used: float | None
    asked: float | None
    bound: float | None
    reason: str
    change: str
    #: for "preempts" the workloads to preempt; for "reclaim_waits_min_runtime" those to preempt
    #: once the wait is over
    victims: tuple[RunningWorkload, ...] = ()
    #: for "reclaim_waits_min_runtime": seconds until preempting becomes allowed
    wait_s: float | None = None
    #: what else blocks, in the order of the checks
    also: tuple[PendingAnswer, ...] = ()

    @property
    def starts(self) -> bool:
        return self.code in STARTS

    def describe(self) -> str:
        """The reason and the change, one sentence a line, then what else blocks."""
        lines = [self.reason, self.change]
        lines += [f"Also: {other.reason}" for other in self.also]
        return "\n".join(lines)


def why_pending(
    root: Queue,
    capacity: Resources,
    running: Sequence[RunningWorkload],
    pending: PendingWorkload,
    *,
    min_runtime_s: float,
    node_free: Sequence[Resources] | None = None,
) -> PendingAnswer:
    """Why `pending` cannot start now, or that it can (see the module docstring for the order).

    `node_free`: each node's free resources, for the one-node check; None or empty skips it.
    """
    ask = _checked_ask(pending)
    path = _path_to(root, pending.tenant)
    if path is None or path[-1].children:
        return _unknown_tenant(root, pending.tenant, path is not None)
    tenant = path[-1]
    usage = usage_by_tenant(running)
    held = usage.get(tenant.name, {})
    blockers = [
        block
        for queue in reversed(path)
        if (block := _limit_block(queue, tenant.name, usage, ask)) is not None
    ]
    free = subtract(capacity, add(*usage.values()))
    started: PendingAnswer | None = None
    if not fits(ask, capacity):
        blockers.append(_exceeds_capacity(root, capacity, usage, ask))
    elif fits(ask, free):
        if node_free and not any(fits(ask, node) for node in node_free):
            blockers.append(_no_node_fits(root, usage, ask, node_free))
    elif fits(add(held, ask), tenant.guarantee):
        plan = reclaim(root, running, capacity, tenant.name, ask, min_runtime_s)
        if plan.met:
            started = _preempts(tenant, held, ask, free, plan)
        else:
            blockers.append(_reclaim_refused(root, running, capacity, tenant, ask, min_runtime_s))
    else:
        blockers += _borrow_blocks(root, capacity, usage, path, ask, free)
    if blockers:
        first, *rest = blockers
        return replace(first, also=tuple(rest))
    return started or _schedulable(pending, tenant, held, ask, free)


# --- the checks -------------------------------------------------------------------------------


def _limit_block(
    queue: Queue, tenant: str, usage: Mapping[str, Resources], ask: Resources
) -> PendingAnswer | None:
    """The queue's limit, if the ask would take what the queue holds past it."""
    if queue.limit is None:
        return None
    used = add(*(usage.get(t.name, {}) for t in queue.tenants()))
    resource = _first_short(ask, subtract(queue.limit, used))
    if resource is None:
        return None
    u, a, b = used.get(resource, 0.0), ask[resource], queue.limit.get(resource, 0.0)
    own = queue.name == tenant
    who = queue.name if own else f"{queue.name} (above {tenant})"
    if a > b + EPSILON:
        reason = f"The ask of {_amount(a, resource)} alone is past {who}'s {resource} limit of {_number(b)}."
    else:
        reason = (
            f"{who} holds {_amount(u, resource)} and the ask adds {_amount(a, resource)}: "
            f"{_amount(u + a, resource)} is past its {resource} limit of {_number(b)}."
        )
    raise_to = f"Raise {queue.name}'s {resource} limit from {_number(b)} to {_number(u + a)}"
    if a > b + EPSILON:
        change = f"{raise_to}; waiting never helps, the ask alone is over the limit."
    else:
        whose = "its" if own else f"{queue.name}'s"
        wait = f"wait for {_amount(u + a - b, resource)} of {whose} running work to finish"
        change = f"{raise_to}, or {wait}."
    return PendingAnswer(
        "limit" if own else "ancestor_limit", queue.name, resource, u, a, b, reason, change
    )


def _exceeds_capacity(
    root: Queue, capacity: Resources, usage: Mapping[str, Resources], ask: Resources
) -> PendingAnswer:
    resource = _first_short(ask, capacity)
    assert resource is not None  # the caller saw the ask not fit
    a, b = ask[resource], capacity.get(resource, 0.0)
    return PendingAnswer(
        "exceeds_capacity",
        root.name,
        resource,
        add(*usage.values()).get(resource, 0.0),
        a,
        b,
        f"The ask of {_amount(a, resource)} is more than the whole cluster has ({_number(b)}).",
        f"Add {_amount(a - b, resource)} of capacity, or ask for at most {_amount(b, resource)}.",
    )


def _no_node_fits(
    root: Queue, usage: Mapping[str, Resources], ask: Resources, node_free: Sequence[Resources]
) -> PendingAnswer:
    """Enough is free in total but on no single node: name the shortfall of the closest node."""
    best = max(node_free, key=lambda node: sum(1 for r in ask if fits({r: ask[r]}, node)))
    resource = _first_short(ask, best)
    assert resource is not None  # no node fits the ask
    largest = max(node.get(resource, 0.0) for node in node_free)
    if ask[resource] > largest + EPSILON:
        resource_free = f"the most any node has free is {_amount(largest, resource)}"
        bound = largest
    else:
        resource_free = "no node has all of it free at once"
        bound = best.get(resource, 0.0)
    wanted = " and ".join(_amount(a, r) for r, a in ask.items() if a > 0)
    return PendingAnswer(
        "no_node_fits",
        root.name,
        resource,
        add(*usage.values()).get(resource, 0.0),
        ask[resource],
        bound,
        f"Enough is free in the cluster, but on no single node: {resource_free}.",
        f"A node with {wanted} free ({resource_free}): wait for work on one node to finish.",
    )


def _preempts(
    tenant: Queue, held: Resources, ask: Resources, free: Resources, plan: ReclaimPlan
) -> PendingAnswer:
    resource = _first_short(ask, free)
    assert resource is not None  # reclaim had to preempt
    names = _names(plan.victims)
    return PendingAnswer(
        "preempts",
        tenant.name,
        resource,
        held.get(resource, 0.0),
        ask[resource],
        tenant.guarantee.get(resource, 0.0),
        f"{_inside(tenant, held, ask, resource)}, with {_amount(max(free[resource], 0.0), resource)} "
        "free, so it reclaims borrowed capacity.",
        f"Nothing has to change: it starts after preempting {names}.",
        victims=plan.victims,
    )


def _reclaim_refused(
    root: Queue,
    running: Sequence[RunningWorkload],
    capacity: Resources,
    tenant: Queue,
    ask: Resources,
    min_runtime_s: float,
) -> PendingAnswer:
    """Reclaim said no: find whether waiting for victims' minimum runtime would make it say yes.

    A workload `running_s` old passes the minimum after `min_runtime_s - running_s`; reclaim with
    the minimum lowered to `running_s` sees the same candidates in the same order as reclaim will
    then, so the shortest wait is the first such threshold at which reclaim is met. The workload
    named is one that becomes old enough just then: a victim where one does, else one that
    reclaim's search needs on the way and its pruning spares in the end.
    """
    usage = usage_by_tenant(running)
    held = usage.get(tenant.name, {})
    free = subtract(capacity, add(*usage.values()))
    resource = _first_short(ask, free)
    assert resource is not None  # reclaim is refused only when the ask does not fit
    numbers = (held.get(resource, 0.0), ask[resource], tenant.guarantee.get(resource, 0.0))
    short = ask[resource] - free[resource]
    tenants = {t.name for t in root.tenants()}
    preemptible = [w for w in running if w.tenant != tenant.name and w.tenant in tenants]
    young = sorted({w.running_s for w in preemptible if w.running_s < min_runtime_s}, reverse=True)
    for threshold in young:
        plan = reclaim(root, running, capacity, tenant.name, ask, threshold)
        if plan.met:
            # one that passes the minimum last; it may be one reclaim only needs on the way
            newly = [w for w in preemptible if w.running_s == threshold]
            last = next((w for w in plan.victims if w.running_s == threshold), newly[0])
            wait_s = min_runtime_s - threshold
            return PendingAnswer(
                "reclaim_waits_min_runtime",
                tenant.name,
                resource,
                *numbers,
                f"{_inside(tenant, held, ask, resource)}, so it may reclaim borrowed capacity, "
                f"but {last.name} has run {_number(last.running_s)} s of the "
                f"{_number(min_runtime_s)} s minimum runtime.",
                f"Wait {_number(wait_s)} s until {last.name} passes the "
                f"{_number(min_runtime_s)} s minimum runtime; then preempting "
                f"{_names(plan.victims)} makes room.",
                victims=plan.victims,
                wait_s=wait_s,
            )
    return PendingAnswer(
        "reclaim_not_enough",
        tenant.name,
        resource,
        *numbers,
        f"{_inside(tenant, held, ask, resource)}, with {_amount(max(free[resource], 0.0), resource)} "
        "free, and the workloads reclaim may preempt "
        f"(borrowed ones, leaving their tenants their guarantees) cannot free "
        f"{_amount(short, resource)}.",
        f"Wait for {_amount(short, resource)} of running work to finish.",
    )


def _borrow_blocks(
    root: Queue,
    capacity: Resources,
    usage: Mapping[str, Resources],
    path: Sequence[Queue],
    ask: Resources,
    free: Resources,
) -> list[PendingAnswer]:
    """A claim beyond the guarantee waits for idle capacity; say its fair share as well."""
    tenant = path[-1]
    held = usage.get(tenant.name, {})
    after = add(held, ask)
    resource = _first_short(ask, free)
    over = _first_short(after, tenant.guarantee)
    assert resource is not None  # the caller saw the ask not fit the free capacity
    assert over is not None  # nor the guarantee
    demands = {**usage, tenant.name: after}
    share = fair_shares(root, capacity, demands)[tenant.name]
    past = _first_short(after, add(share, dict.fromkeys(after, 1e-6)))
    fairness = (
        "within its fair share"
        if past is None
        else f"past its fair share of {_amount(share.get(past, 0.0), past)}"
    )
    idle = max(free.get(resource, 0.0), 0.0)
    short = ask[resource] - idle
    blocks = [
        PendingAnswer(
            "no_idle_capacity_to_borrow",
            root.name,
            resource,
            add(*usage.values()).get(resource, 0.0),
            ask[resource],
            capacity.get(resource, 0.0),
            f"{tenant.name} would hold {_amount(after[over], over)}, past its guarantee of "
            f"{_number(tenant.guarantee.get(over, 0.0))}, so the ask must borrow idle capacity "
            f"with {_amount(idle, resource)} idle (it would be {fairness}); only a claim "
            f"inside a guarantee preempts.",
            f"Wait for {_amount(short, resource)} of running work to finish, or raise "
            f"{tenant.name}'s {over} guarantee from {_number(tenant.guarantee.get(over, 0.0))} "
            f"to {_number(after[over])}{_and_above(root, capacity, path, over, after[over])} so "
            "the claim may reclaim borrowed capacity.",
        )
    ]
    if past is not None:
        s = share.get(past, 0.0)
        blocks.append(
            PendingAnswer(
                "fair_share_exceeded",
                tenant.name,
                past,
                held.get(past, 0.0),
                ask[past],
                s,
                f"{tenant.name} would hold {_amount(after[past], past)}, past its fair share of "
                f"{_amount(s, past)} given what the others hold.",
                f"Wait until the others hold less, so that {tenant.name}'s fair share grows by "
                f"{_amount(after[past] - s, past)}, or raise {tenant.name}'s guarantee or weight.",
            )
        )
    return blocks


def _schedulable(
    pending: PendingWorkload, tenant: Queue, held: Resources, ask: Resources, free: Resources
) -> PendingAnswer:
    after = add(held, ask)
    borrows = _first_short(after, tenant.guarantee)
    how = ""
    if borrows is not None:
        beyond = after[borrows] - tenant.guarantee.get(borrows, 0.0)
        how = (
            f", borrowing {_amount(min(beyond, ask[borrows]), borrows)} of idle capacity beyond "
            f"{tenant.name}'s guarantee (a claim inside another tenant's guarantee may preempt "
            "it later)"
        )
    return PendingAnswer(
        "schedulable",
        tenant.name,
        None,
        None,
        None,
        None,
        f"{pending.name} fits the free capacity and every limit{how}.",
        "Nothing has to change: it can start now.",
    )


def _unknown_tenant(root: Queue, name: str, is_queue: bool) -> PendingAnswer:
    tenants = [t.name for t in root.tenants()]
    listed = ", ".join(tenants[:5]) + (", ..." if len(tenants) > 5 else "")
    what = "a team, not a tenant" if is_queue else f"not a queue under {root.name}"
    return PendingAnswer(
        "unknown_tenant",
        name,
        None,
        None,
        None,
        None,
        f"{name} is {what}; only tenants run workloads.",
        f"Submit it under one of the tenants ({listed}), or add {name} as a tenant.",
    )


# --- small pieces -----------------------------------------------------------------------------


def _checked_ask(pending: PendingWorkload) -> Resources:
    for resource, amount in pending.resources.items():
        if amount < 0:
            raise ValueError(
                f"pending workload {pending.name}: {resource} must be >= 0, got {amount}"
            )
    return pending.resources


def _path_to(root: Queue, name: str) -> list[Queue] | None:
    """The queues from `root` down to the one named `name`, or None if there is none."""
    if root.name == name:
        return [root]
    for child in root.children:
        below = _path_to(child, name)
        if below is not None:
            return [root, *below]
    return None


def _first_short(demand: Resources, room: Resources) -> str | None:
    """The first resource of `demand` that `room` cannot hold, or None if it all fits."""
    return next((r for r, a in demand.items() if not fits({r: a}, room)), None)


def _inside(tenant: Queue, held: Resources, ask: Resources, resource: str) -> str:
    after = held.get(resource, 0.0) + ask[resource]
    guarantee = tenant.guarantee.get(resource, 0.0)
    return (
        f"{tenant.name} would hold {_amount(after, resource)}, inside its guarantee of "
        f"{_number(guarantee)}"
    )


def _and_above(
    root: Queue, capacity: Resources, path: Sequence[Queue], resource: str, raised: float
) -> str:
    """' (and the guarantees above it ...)' where the raised guarantee outgrows its parent's."""
    parent = path[-2]
    siblings = sum(c.guarantee.get(resource, 0.0) for c in parent.children)
    delta = raised - path[-1].guarantee.get(resource, 0.0)
    bound = parent.guarantee or (capacity if parent is root else {})
    if siblings + delta > bound.get(resource, 0.0) + EPSILON:
        return " (and the guarantees above it to match)"
    return ""


def _names(workloads: Sequence[RunningWorkload]) -> str:
    return ", ".join(f"{w.name} ({w.tenant})" for w in workloads)


def _number(value: float) -> str:
    """A number as people write it: 8, 2.5, 0.33."""
    if abs(value - round(value)) < 1e-6:
        return str(round(value))
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _amount(value: float, resource: str) -> str:
    """`2 GPUs`, `1 CPU`, `4096 memory_mib`."""
    if resource in ("gpu", "cpu"):
        unit = resource.upper()
        return f"{_number(value)} {unit}{'' if _number(value) == '1' else 's'}"
    return f"{_number(value)} {resource}"
