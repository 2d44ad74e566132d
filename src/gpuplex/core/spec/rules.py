"""Cross-field rules that pydantic cannot express: names unique, references resolve, requests possible
on this fleet and within quota. Each rule returns problems; `check_spec` returns them all at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from gpuplex.core.catalog import GPU_MODELS, GpuModel, gpu_model, gpu_model_names
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import MigModeSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.core.spec.pools import fleet_pools, gpu_pool, pool_accepts, workload_pool
from gpuplex.core.spec.tenants import Isolation, Requirement, TenantSpec
from gpuplex.core.spec.workloads import GpuRequestSpec, WorkloadKind, WorkloadSpec
from gpuplex.errors import SpecProblem

Path = tuple[str | int, ...]


def check_spec(spec: GpuplexSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    problems += _check_fleet(spec)
    problems += _check_names(spec)
    problems += _check_references(spec)
    candidates_for = _CandidateFinder(spec)
    for t, tenant in enumerate(spec.tenants):
        problems += _check_isolation(tenant, ("tenants", t))
        for w, workload in enumerate(tenant.workloads):
            path: Path = ("tenants", t, "workloads", w)
            problems += _check_request(spec, tenant, workload, path, candidates_for)
        problems += _check_quota(tenant, ("tenants", t))
    problems += _check_pricing(spec)
    return problems


def _check_isolation(tenant: TenantSpec, path: Path) -> Iterator[SpecProblem]:
    if tenant.regulated and tenant.requirement not in (None, Requirement.HARD):
        yield SpecProblem(
            (*path, "requirement"),
            f"regulated: true implies requirement: hard, but requirement is {tenant.requirement}",
        )
    required = tenant.effective_requirement
    shared = tenant.isolation in (Isolation.MPS, Isolation.TIMESLICE)
    if shared and required in (Requirement.HARD, Requirement.STRONG):
        yield SpecProblem(
            (*path, "isolation"),
            f"requirement {required} needs hardware isolation: use isolation mig, dedicated "
            f"or auto, not {tenant.isolation}",
        )


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
            yield from _check_serving(tenants, tenant, workload, path)


def _check_serving(
    tenants: dict[str, TenantSpec], tenant: TenantSpec, workload: WorkloadSpec, path: Path
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
    if base.serve is not None and base.serve.lora_of is not None:
        yield SpecProblem(
            where,
            f"{serve.lora_of} is itself an adapter on {base.serve.lora_of}: point lora_of at "
            "the base server",
        )
        return
    if base.serve is None or not base.serve.accepts_adapters:
        yield SpecProblem(
            where, f"{serve.lora_of} does not accept adapters: set serve.accepts_adapters there"
        )
    if owner.name == tenant.name:
        return
    reason = tenant.own_gpus_reason
    if reason is not None:
        yield SpecProblem(
            where,
            f"tenant {tenant.name} needs its own GPUs ({reason}) and cannot run inside "
            f"{owner.name}'s server; give it its own gpu",
        )
    if owner.exclusive_gpus or owner.effective_requirement is Requirement.HARD:
        yield SpecProblem(
            where,
            f"{owner.name} keeps hard isolation (regulated, requirement hard or exclusive_gpus): "
            "its servers cannot host other tenants' adapters",
        )
    if owner.name in tenant.never_share_with or tenant.name in owner.never_share_with:
        yield SpecProblem(where, f"{tenant.name} and {owner.name} must never share a GPU")


@dataclass(frozen=True, slots=True)
class _Candidate:
    """GPUs of one model that a workload may use, as far as validation cares."""

    model: GpuModel
    mig_ok: bool  # MIG-capable and not mig: off
    whole_ok: bool  # not mig: on, so usable whole or for MPS / time-slicing
    most_on_one_node: int


class _CandidateFinder:
    """Candidate GPUs per pool, computed once per pool (the fleet is walked once per pool)."""

    def __init__(self, spec: GpuplexSpec) -> None:
        self.spec = spec
        self.pools = fleet_pools(spec.fleet)
        self.by_pool: dict[str | None, list[_Candidate]] = {}

    def __call__(self, workload: WorkloadSpec) -> list[_Candidate]:
        wanted = workload_pool(self.pools, workload)
        if wanted not in self.by_pool:
            self.by_pool[wanted] = self._find(wanted)
        return self.by_pool[wanted]

    def _find(self, wanted: str | None) -> list[_Candidate]:
        most: dict[tuple[GpuModel, bool, bool], int] = {}
        for node in self.spec.fleet.nodes:
            per_node: Counter[tuple[GpuModel, bool, bool]] = Counter()
            for group in node.gpus:
                model = gpu_model(group.model)
                if model is None or not pool_accepts(gpu_pool(node, group), wanted):
                    continue
                mig_ok = model.mig is not None and group.mig is not MigModeSpec.OFF
                # mig: on for a card without MIG is reported by the fleet check; no follow-on here
                whole_ok = group.mig is not MigModeSpec.ON or model.mig is None
                per_node[(model, mig_ok, whole_ok)] += group.count
            for key, count in per_node.items():
                most[key] = max(most.get(key, 0), count)
        return [_Candidate(*key, count) for key, count in most.items()]


def _check_request(
    spec: GpuplexSpec,
    tenant: TenantSpec,
    workload: WorkloadSpec,
    path: Path,
    candidates_for: _CandidateFinder,
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
        return
    if request.mig_profile is not None and mode not in (Isolation.MIG, Isolation.AUTO):
        yield SpecProblem(
            (*where, "mig_profile"), f"a MIG profile needs isolation mig or auto, not {mode}"
        )
        return
    if spec.fleet.discover and not spec.fleet.nodes:
        return  # the inventory is not known until the host runtime discovers it
    candidates = candidates_for(workload)
    if request.model is not None:
        if gpu_model(request.model) is None:
            yield SpecProblem(
                (*where, "model"),
                f"unknown GPU model {request.model!r}{did_you_mean(request.model, gpu_model_names())}",
            )
            return
        in_pool = sorted({c.model.name for c in candidates})
        candidates = [c for c in candidates if c.model.name == request.model]
        if not candidates and in_pool:
            yield SpecProblem(
                (*where, "model"),
                f"no {request.model} in this workload's pool; models there: {', '.join(in_pool)}",
            )
            return
    if not candidates:
        if _fleet_is_known(spec) and not _pool_is_unknown(spec, workload):
            pools = ", ".join(sorted(fleet_pools(spec.fleet)))
            yield SpecProblem(
                where, f"no GPU can take this workload: every GPU is in a pool ({pools}); set pool"
            )
        return  # otherwise the fleet or pool problem is reported already: one cause, one message
    if request.mig_profile is not None or mode is Isolation.MIG:
        yield from _check_mig_request(request, [c for c in candidates if c.mig_ok], where)
        return
    usable = candidates
    if mode is not Isolation.AUTO or request.count is not None:
        usable = [c for c in candidates if c.whole_ok]
        if not usable:
            yield SpecProblem(
                where,
                f"isolation {'dedicated' if request.count else mode} needs a GPU without MIG, "
                "but every GPU in this workload's pool has mig: on",
            )
            return
    if request.memory_gib is not None:
        largest = max(c.model.memory_gib for c in usable)
        if request.memory_gib > largest:
            yield SpecProblem(
                (*where, "memory_gib"),
                f"{request.memory_gib:g} GiB is more than the largest candidate GPU "
                f"({largest:.1f} GiB)",
            )
    if request.count is not None:
        most = max(c.most_on_one_node for c in usable)
        if request.count > most:
            yield SpecProblem(
                (*where, "count"),
                f"{request.count} GPUs on one node, but no node has more than {most} candidate GPUs",
            )


def _check_mig_request(
    request: GpuRequestSpec, candidates: list[_Candidate], where: Path
) -> Iterator[SpecProblem]:
    profiles = [p for c in candidates if c.model.mig for p in c.model.mig.profiles]
    names = sorted({p.name for p in profiles})
    if request.mig_profile is not None:
        if request.mig_profile not in names:
            known = ", ".join(names) if names else "none (no MIG-capable GPU with mig on or auto)"
            hint = did_you_mean(request.mig_profile, names)
            yield SpecProblem(
                (*where, "mig_profile"),
                f"profile {request.mig_profile!r} exists on no candidate GPU{hint}; "
                f"profiles there: {known}",
            )
        return
    if not profiles:
        yield SpecProblem(
            where,
            "isolation mig, but no GPU in this workload's pool can run MIG (capable, not off)",
        )
        return
    if request.memory_gib is not None:
        largest = max(profiles, key=lambda p: p.memory_mib)
        if request.memory_gib * 1024 > largest.memory_mib:
            yield SpecProblem(
                (*where, "memory_gib"),
                f"{request.memory_gib:g} GiB fits no MIG profile on the candidate GPUs "
                f"(largest: {largest.name}, {largest.memory_mib / 1024:.1f} GiB)",
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
