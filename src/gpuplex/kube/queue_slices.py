"""MIG slices for queued jobs: on Kubernetes the MIG manager cuts each GPU once, by the layout
gpuplex renders, so a slice a queued job may get must be in that layout before the job comes.

The plan's MIG GPUs keep exactly their planned slices (its replicas hold them). A GPU held in MIG
mode that the plan leaves empty (`mig: "on"`) is cut for the queues instead: the profiles that
tenants' queues guarantee or may borrow up to (their `limit`), one slice of each in turn, largest
demand first, on the GPUs in fleet order, each slice at a start the catalog's geometry allows,
until every queue's demand is met or no more fit. What is cut is what Kueue's MIG quotas offer, so
every admitted job's pod finds its slice. Pure.
"""

from __future__ import annotations

from collections import Counter

from gpuplex.core.catalog import MigGeometry, MigProfile
from gpuplex.core.plan import Plan
from gpuplex.core.queues.tree import amounts
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.queue_isolation import Sharing, allowed_sharing
from gpuplex.core.spec.quota_kinds import MIG_PREFIX
from gpuplex.kube.nodes import node_gpus

#: (node, GPU index) -> profile -> slices cut for the queues.
QueueSlices = dict[tuple[str, int], dict[str, int]]


def queue_mig_demand(spec: GpuplexSpec) -> Counter[str]:
    """Profile -> the slices the tenants' queues guarantee, or their limits where higher; only
    tenants whose isolation allows MIG. Empty without Kueue or queues."""
    if spec.kubernetes.kueue is None or not spec.queues.enabled:
        return Counter()
    tenants = {t.name: t for t in spec.tenants}
    demand: Counter[str] = Counter()
    for org in spec.queues.organisations:
        for team in org.teams:
            for leaf in team.tenants:
                tenant = tenants.get(leaf.name)
                if tenant is None or Sharing.MIG not in allowed_sharing(tenant):
                    continue
                wanted = amounts(leaf.guarantee)
                if leaf.limit is not None:
                    for kind, value in amounts(leaf.limit).items():
                        wanted[kind] = max(wanted.get(kind, 0.0), value)
                for kind, value in wanted.items():
                    if kind.startswith(MIG_PREFIX):
                        demand[kind.removeprefix(MIG_PREFIX)] += int(value)
    return demand


def queue_mig_slices(spec: GpuplexSpec, plan: Plan) -> QueueSlices:
    """The slices cut for the queues on the MIG GPUs the plan leaves empty (module docstring)."""
    demand = queue_mig_demand(spec)
    out: QueueSlices = {}
    if not demand:
        return out
    for item in node_gpus(spec, plan):
        for gpu in item.mig_gpus():
            model = spec.fleet.catalog.model(gpu.model)
            if gpu.occupants or model is None or model.mig is None:
                continue
            cut = _cut(model.mig, demand)
            if cut:
                out[(item.name, gpu.index)] = cut
                demand.subtract(cut)
            if not +demand:
                return out
    return out


def _cut(geometry: MigGeometry, demand: Counter[str]) -> dict[str, int]:
    """Slices of the demanded profiles on one empty GPU: one of each in turn, largest demand
    first, while any fits."""
    profiles = [
        profile
        for name, _ in sorted(demand.items(), key=lambda item: (-item[1], item[0]))
        if (profile := geometry.profile(name)) is not None
    ]
    left = Counter({p.name: demand[p.name] for p in profiles})
    counts: Counter[str] = Counter()
    used: set[int] = set()
    compute = 0
    placed = True
    while placed:
        placed = False
        for profile in profiles:
            if left[profile.name] <= 0:
                continue
            start = _free_start(geometry, profile, used, compute, counts[profile.name])
            if start is None:
                continue
            used.update(range(start, start + profile.memory_slices))
            compute += profile.compute_slices
            counts[profile.name] += 1
            left[profile.name] -= 1
            placed = True
    return {p.name: counts[p.name] for p in geometry.profiles if counts[p.name]}


def _free_start(
    geometry: MigGeometry, profile: MigProfile, used: set[int], compute: int, count: int
) -> int | None:
    if count >= profile.max_count or compute + profile.compute_slices > geometry.compute_slices:
        return None
    for start in profile.starts:
        slots = range(start, start + profile.memory_slices)
        if slots.stop <= geometry.memory_slices and not used.intersection(slots):
            return start
    return None
