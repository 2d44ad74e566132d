"""Cross-field rules that pydantic cannot express: names unique, references resolve, requests possible
on this fleet and within quota. Each rule returns problems; `check_spec` returns them all at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gpuplex.core.catalog import GPU_MODELS, GpuModel, gpu_model, gpu_model_names
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import MigModeSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.core.spec.pools import fleet_pools, gpu_pool, pool_accepts, workload_pool
from gpuplex.core.spec.tenants import Isolation, Requirement, TenantSpec
from gpuplex.core.spec.workloads import WorkloadKind, WorkloadSpec
from gpuplex.errors import SpecProblem

Path = tuple[str | int, ...]


def check_spec(spec: GpuplexSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    problems += _check_fleet(spec)
    problems += _check_names(spec)
    problems += _check_references(spec)
    for t, tenant in enumerate(spec.tenants):
        for w, workload in enumerate(tenant.workloads):
            problems += _check_request(spec, tenant, workload, ("tenants", t, "workloads", w))
        problems += _check_quota(tenant, ("tenants", t))
    problems += _check_pricing(spec)
    return problems


def _check_fleet(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    fleet = spec.fleet
    if not fleet.discover and not fleet.nodes:
        yield SpecProblem(
            ("fleet",), "no nodes: list them under fleet.nodes, or set discover: true"
        )
    seen_uuids: set[str] = set()
    for n, node in enumerate(fleet.nodes):
        for g, group in enumerate(node.gpus):
            path: Path = ("fleet", "nodes", n, "gpus", g)
            model = gpu_model(group.model)
            if model is None:
                yield SpecProblem(
                    (*path, "model"),
                    f"unknown GPU model {group.model!r}{did_you_mean(group.model, gpu_model_names())}"
                    f"; known models: {', '.join(gpu_model_names())}",
                )
            elif group.mig is MigModeSpec.ON and model.mig is None:
                yield SpecProblem((*path, "mig"), f"{model.name} has no MIG; use mig: off")
            if group.uuids is not None:
                if len(group.uuids) != group.count:
                    yield SpecProblem(
                        (*path, "uuids"),
                        f"{len(group.uuids)} UUIDs for count {group.count}: give one UUID per GPU",
                    )
                for uuid in group.uuids:
                    if uuid in seen_uuids:
                        yield SpecProblem((*path, "uuids"), f"UUID {uuid} is listed twice")
                    seen_uuids.add(uuid)


def _duplicates(names: list[str], path: Path, what: str) -> Iterator[SpecProblem]:
    counts = Counter(names)
    for i, name in enumerate(names):
        if counts[name] > 1 and names.index(name) != i:
            yield SpecProblem((*path, i, "name"), f"duplicate {what} name {name!r}")


def _check_names(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    yield from _duplicates([n.name for n in spec.fleet.nodes], ("fleet", "nodes"), "node")
    yield from _duplicates([t.name for t in spec.tenants], ("tenants",), "tenant")
    for t, tenant in enumerate(spec.tenants):
        names = [w.name for w in tenant.workloads]
        yield from _duplicates(names, ("tenants", t, "workloads"), "workload")


def _check_references(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    tenants = {tenant.name: tenant for tenant in spec.tenants}
    pools = fleet_pools(spec.fleet)
    for t, tenant in enumerate(spec.tenants):
        for i, other in enumerate(tenant.never_share_with):
            path: Path = ("tenants", t, "never_share_with", i)
            if other == tenant.name:
                yield SpecProblem(path, "a tenant cannot exclude itself")
            elif other not in tenants:
                yield SpecProblem(path, f"unknown tenant {other!r}{did_you_mean(other, tenants)}")
        for w, workload in enumerate(tenant.workloads):
            path = ("tenants", t, "workloads", w)
            if workload.pool is not None and workload.pool not in pools and not spec.fleet.discover:
                known = ", ".join(sorted(pools)) or "none defined"
                yield SpecProblem(
                    (*path, "pool"),
                    f"no GPU is in pool {workload.pool!r}{did_you_mean(workload.pool, pools)}; "
                    f"pools: {known}",
                )
            yield from _check_serving(spec, tenants, tenant, workload, path)


def _check_serving(
    spec: GpuplexSpec,
    tenants: dict[str, TenantSpec],
    tenant: TenantSpec,
    workload: WorkloadSpec,
    path: Path,
) -> Iterator[SpecProblem]:
    serve = workload.serve
    if serve is not None and workload.kind is not WorkloadKind.INFERENCE:
        yield SpecProblem((*path, "serve"), f"serve is for kind inference, not {workload.kind}")
    if serve is None or serve.lora_of is None:
        if workload.gpu is None:
            yield SpecProblem(
                (*path, "gpu"),
                "required field is missing: ask for count, memory_gib or mig_profile "
                "(or serve.lora_of to run as an adapter on a shared base)",
            )
        return
    if workload.gpu is not None:
        yield SpecProblem(
            (*path, "gpu"), "a LoRA adapter runs on its base server's GPU: remove gpu or lora_of"
        )
    owner_name, _, base_name = serve.lora_of.partition("/")
    owner = tenants.get(owner_name)
    base = next((w for w in owner.workloads if w.name == base_name), None) if owner else None
    where = (*path, "serve", "lora_of")
    if owner is None or base is None:
        yield SpecProblem(
            where, f"{serve.lora_of!r} does not name a workload: write tenant/workload"
        )
        return
    if base.serve is None or not base.serve.accepts_adapters:
        yield SpecProblem(
            where, f"{serve.lora_of} does not accept adapters: set serve.accepts_adapters there"
        )
    if owner.name != tenant.name:
        if tenant.effective_requirement in (Requirement.HARD, Requirement.STRONG) or (
            tenant.exclusive_gpus
        ):
            yield SpecProblem(
                where,
                f"tenant {tenant.name} needs its own GPUs (requirement "
                f"{tenant.effective_requirement or 'exclusive_gpus'}) and cannot share a base "
                f"server with {owner.name}",
            )
        if owner.name in tenant.never_share_with or tenant.name in owner.never_share_with:
            yield SpecProblem(where, f"{tenant.name} and {owner.name} must never share a GPU")


def _candidate_models(
    spec: GpuplexSpec, workload: WorkloadSpec
) -> list[tuple[GpuModel, int, bool]]:
    """(model, most GPUs of that model on one node in the pool, MIG allowed) for candidate GPUs."""
    pools = fleet_pools(spec.fleet)
    wanted = workload_pool(pools, workload)
    found: dict[tuple[str, bool], tuple[GpuModel, int, bool]] = {}
    for node in spec.fleet.nodes:
        per_node: Counter[tuple[str, bool]] = Counter()
        for group in node.gpus:
            model = gpu_model(group.model)
            if model is None or not pool_accepts(gpu_pool(node, group), wanted):
                continue
            mig_ok = model.mig is not None and group.mig is not MigModeSpec.OFF
            per_node[(model.name, mig_ok)] += group.count
            found.setdefault((model.name, mig_ok), (model, 0, mig_ok))
        for key, count in per_node.items():
            model, best, mig_ok = found[key]
            found[key] = (model, max(best, count), mig_ok)
    return list(found.values())


def _check_request(
    spec: GpuplexSpec, tenant: TenantSpec, workload: WorkloadSpec, path: Path
) -> Iterator[SpecProblem]:
    request = workload.gpu
    if request is None:
        return
    where = (*path, "gpu")
    mode = tenant.isolation
    if request.count is not None and mode in (Isolation.MIG, Isolation.MPS, Isolation.TIMESLICE):
        yield SpecProblem(
            (*where, "count"),
            f"whole GPUs need isolation dedicated or auto (tenant isolation is {mode}); "
            "ask for memory_gib or mig_profile instead",
        )
    if request.mig_profile is not None and mode not in (Isolation.MIG, Isolation.AUTO):
        yield SpecProblem(
            (*where, "mig_profile"), f"a MIG profile needs isolation mig or auto, not {mode}"
        )
    if spec.fleet.discover and not spec.fleet.nodes:
        return  # the inventory is not known until the host runtime discovers it
    candidates = _candidate_models(spec, workload)
    if not candidates:
        if _fleet_is_known(spec) and not _pool_is_unknown(spec, workload):
            pools = ", ".join(sorted(fleet_pools(spec.fleet)))
            yield SpecProblem(
                where, f"no GPU can take this workload: every GPU is in a pool ({pools}); set pool"
            )
        return  # otherwise the fleet or pool problem is reported already: one cause, one message
    if request.mig_profile is not None:
        names = sorted({p.name for m, _, ok in candidates if ok and m.mig for p in m.mig.profiles})
        if request.mig_profile not in names:
            known = ", ".join(names) if names else "none (no MIG-capable GPU with mig on or auto)"
            hint = did_you_mean(request.mig_profile, names)
            yield SpecProblem(
                (*where, "mig_profile"),
                f"profile {request.mig_profile!r} exists on no candidate GPU{hint}; "
                f"profiles there: {known}",
            )
    if request.memory_gib is not None:
        largest = max(model.memory_gib for model, _, _ in candidates)
        if request.memory_gib > largest:
            yield SpecProblem(
                (*where, "memory_gib"),
                f"{request.memory_gib:g} GiB is more than the largest candidate GPU "
                f"({largest:.1f} GiB)",
            )
    if request.count is not None:
        most = max(count for _, count, _ in candidates)
        if request.count > most:
            yield SpecProblem(
                (*where, "count"),
                f"{request.count} GPUs on one node, but no node has more than {most} candidate GPUs",
            )


def _fleet_is_known(spec: GpuplexSpec) -> bool:
    models = [group.model for node in spec.fleet.nodes for group in node.gpus]
    return bool(models) and all(gpu_model(model) is not None for model in models)


def _pool_is_unknown(spec: GpuplexSpec, workload: WorkloadSpec) -> bool:
    return workload.pool is not None and workload.pool not in fleet_pools(spec.fleet)


def _check_quota(tenant: TenantSpec, path: Path) -> Iterator[SpecProblem]:
    """Requests that exceed the tenant's quota whatever GPU they land on."""
    quota = tenant.quota
    whole = sum(w.gpu.count * w.replicas for w in tenant.workloads if w.gpu and w.gpu.count)
    memory = sum(
        w.gpu.memory_gib * w.replicas for w in tenant.workloads if w.gpu and w.gpu.memory_gib
    )
    compute = sum(
        w.gpu.compute_percent * w.replicas
        for w in tenant.workloads
        if w.gpu and w.gpu.compute_percent
    )
    if quota.gpus is not None and whole > quota.gpus:
        yield SpecProblem(
            (*path, "quota", "gpus"),
            f"workloads ask for {whole} whole GPUs, over the quota of {quota.gpus}",
        )
    if quota.gpu_memory_gib is not None and memory > quota.gpu_memory_gib:
        yield SpecProblem(
            (*path, "quota", "gpu_memory_gib"),
            f"workloads ask for {memory:g} GiB of GPU memory, over the quota of "
            f"{quota.gpu_memory_gib:g}",
        )
    if quota.compute_percent is not None and compute > quota.compute_percent:
        yield SpecProblem(
            (*path, "quota", "compute_percent"),
            f"workloads ask for {compute}% compute, over the quota of {quota.compute_percent}%",
        )
    known_profiles = {p.name for m in GPU_MODELS if m.mig for p in m.mig.profiles}
    for profile, limit in quota.mig.items():
        if profile not in known_profiles:
            yield SpecProblem(
                (*path, "quota", "mig", profile),
                f"unknown MIG profile {profile!r}{did_you_mean(profile, known_profiles)}",
            )
            continue
        asked = sum(w.replicas for w in tenant.workloads if w.gpu and w.gpu.mig_profile == profile)
        if asked > limit:
            yield SpecProblem(
                (*path, "quota", "mig", profile),
                f"workloads ask for {asked} x {profile}, over the quota of {limit}",
            )


def _check_pricing(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    for name in spec.pricing.gpu_hour:
        if gpu_model(name) is None:
            yield SpecProblem(
                ("pricing", "gpu_hour", name),
                f"unknown GPU model {name!r}{did_you_mean(name, gpu_model_names())}",
            )
