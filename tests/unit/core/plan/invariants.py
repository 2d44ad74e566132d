"""Checks of a Plan against its spec that do not trust the planner's own bookkeeping."""

from __future__ import annotations

from collections import Counter, defaultdict

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, gpu_model
from gpuplex.core.plan import Plan
from gpuplex.core.plan.mig_fit import layout_problems
from gpuplex.core.spec import GpuplexSpec, Requirement
from gpuplex.core.spec.pools import fleet_pools, gpu_pool, pool_accepts, workload_pool


def plan_violations(spec: GpuplexSpec, plan: Plan) -> list[str]:
    return [
        *_gpu_violations(spec, plan),
        *_quota_violations(spec, plan),
        *_accounting_violations(spec, plan),
        *_pool_violations(spec, plan),
    ]


def _gpu_violations(spec: GpuplexSpec, plan: Plan) -> list[str]:
    tenants = {t.name: t for t in spec.tenants}
    out: list[str] = []
    for gpu in plan.gpus:
        where = f"{gpu.node}/{gpu.index}"
        model = gpu_model(gpu.model)
        assert model is not None
        modes = {
            p.mode for p in plan.placements if p.node == gpu.node and gpu.index in p.gpu_indices
        }
        if len(modes) > 1:
            out.append(f"{where}: several modes {modes}")
        if gpu.mode == "mig":
            if model.mig is None:
                out.append(f"{where}: MIG on {model.name}")
                continue
            layout = []
            for o in gpu.occupants:
                profile = model.mig.profile(o.mig.profile) if o.mig else None
                if profile is None or o.mig is None:
                    out.append(f"{where}: occupant without a valid profile")
                    continue
                layout.append((profile, o.mig.start_slot))
            out += [f"{where}: {p}" for p in layout_problems(model.mig, layout)]
        elif gpu.occupants:
            if sum(o.memory_mib for o in gpu.occupants) > model.memory_mib:
                out.append(f"{where}: memory over-committed")
            if sum(o.thread_percent or 0 for o in gpu.occupants) > 100:
                out.append(f"{where}: MPS threads over 100%")
            if len(gpu.occupants) > MPS_CLIENT_LIMIT:
                out.append(f"{where}: over the MPS client limit")
        if gpu.mode == "dedicated" and len(gpu.occupants) != 1:
            out.append(f"{where}: dedicated GPU with {len(gpu.occupants)} occupants")
        names = {o.tenant for o in gpu.occupants}
        if len(names) > 1:
            for name in names:
                tenant = tenants[name]
                if tenant.exclusive_gpus:
                    out.append(f"{where}: exclusive tenant {name} shares")
                if set(tenant.never_share_with) & names:
                    out.append(f"{where}: {name} shares with a tenant it excludes")
                hard = tenant.effective_requirement is Requirement.HARD
                if hard and gpu.mode != "mig":
                    out.append(f"{where}: hard-isolation tenant {name} shares a non-MIG GPU")
    return out


def _quota_violations(spec: GpuplexSpec, plan: Plan) -> list[str]:
    out: list[str] = []
    memory: Counter[str] = Counter()
    compute: Counter[str] = Counter()
    whole: Counter[str] = Counter()
    mig: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for p in plan.placements:
        memory[p.tenant] += p.memory_mib
        compute[p.tenant] += p.compute_percent
        if p.mode == "dedicated":
            whole[p.tenant] += len(p.gpu_indices)
        if p.mig is not None:
            mig[p.tenant][p.mig.profile] += 1
    for tenant in spec.tenants:
        quota = tenant.quota
        if quota.gpus is not None and whole[tenant.name] > quota.gpus:
            out.append(f"{tenant.name}: {whole[tenant.name]} GPUs > quota {quota.gpus}")
        if quota.gpu_memory_gib is not None and memory[tenant.name] > quota.gpu_memory_gib * 1024:
            out.append(f"{tenant.name}: memory over quota")
        if quota.compute_percent is not None and compute[tenant.name] > quota.compute_percent:
            out.append(f"{tenant.name}: compute over quota")
        for profile, limit in quota.mig.items():
            if mig[tenant.name][profile] > limit:
                out.append(f"{tenant.name}: {profile} over quota")
    return out


def _accounting_violations(spec: GpuplexSpec, plan: Plan) -> list[str]:
    wanted = {
        (t.name, w.name, r)
        for t in spec.tenants
        for w in t.workloads
        if w.gpu is not None
        for r in range(w.replicas)
    }
    seen = [(p.tenant, p.workload, p.replica) for p in plan.placements]
    seen += [(i.tenant, i.workload, i.replica) for i in plan.infeasible]
    seen += [(p.tenant, p.workload, p.replica) for p in plan.preemptions]
    out = []
    if len(seen) != len(set(seen)):
        out.append("a replica is reported twice")
    if set(seen) != wanted:
        out.append(f"replicas lost or invented: {sorted(set(seen) ^ wanted)[:5]}")
    return out


def _pool_violations(spec: GpuplexSpec, plan: Plan) -> list[str]:
    pools = fleet_pools(spec.fleet)
    gpu_pools = {}
    for node in spec.fleet.nodes:
        index = 0
        for group in node.gpus:
            for _ in range(group.count):
                gpu_pools[(node.name, index)] = gpu_pool(node, group)
                index += 1
    workloads = {(t.name, w.name): w for t in spec.tenants for w in t.workloads}
    out = []
    for p in plan.placements:
        request = workloads[(p.tenant, p.workload)].gpu
        wanted_gpus = request.count if request is not None and request.count else 1
        if len(set(p.gpu_indices)) != wanted_gpus or len(p.gpu_indices) != wanted_gpus:
            out.append(f"{p.label()}: on GPUs {p.gpu_indices}, asked for {wanted_gpus} GPU(s)")
        if request is not None and request.model not in (None, p.gpu_model):
            out.append(f"{p.label()}: on a {p.gpu_model}, asked for {request.model}")
        wanted = workload_pool(pools, workloads[(p.tenant, p.workload)])
        for index in p.gpu_indices:
            if not pool_accepts(gpu_pools[(p.node, index)], wanted):
                out.append(f"{p.label()}: on a GPU outside pool {wanted}")
    return out
