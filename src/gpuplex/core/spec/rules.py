"""Cross-field rules that pydantic cannot express: names unique, references resolve, requests possible
on this fleet and within quota. Each rule returns problems; `check_spec` returns them all at once."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterator, Sequence

from gpuplex.core.catalog import GPU_MODELS
from gpuplex.core.spec.auth_rules import check_auth
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import MigModeSpec
from gpuplex.core.spec.gateway import LimiterBackend
from gpuplex.core.spec.gpu_model_rules import check_gpu_models
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.core.spec.pools import fleet_pools
from gpuplex.core.spec.pricing_rules import check_pricing
from gpuplex.core.spec.queue_rules import check_queues
from gpuplex.core.spec.requests import CandidateFinder, check_request
from gpuplex.core.spec.runtime import Network
from gpuplex.core.spec.tenants import Isolation, Requirement, TenantSpec
from gpuplex.core.spec.workloads import JOB_WORKLOAD_PREFIX, WorkloadKind, WorkloadSpec
from gpuplex.errors import FieldPath, SpecProblem


def check_spec(spec: GpuplexSpec) -> list[SpecProblem]:
    problems: list[SpecProblem] = []
    problems += check_gpu_models(spec.fleet)
    problems += _check_fleet(spec)
    problems += _check_names(spec)
    problems += _check_references(spec)
    candidates_for = CandidateFinder(spec)
    for t, tenant in enumerate(spec.tenants):
        problems += _check_isolation(tenant, ("tenants", t))
        for w, workload in enumerate(tenant.workloads):
            path: FieldPath = ("tenants", t, "workloads", w)
            problems += check_request(spec, tenant, workload, path, candidates_for)
            problems += _check_runtime(workload, path)
        problems += _check_quota(tenant, ("tenants", t))
    problems += check_pricing(spec)
    problems += _check_gateway(spec)
    problems += check_queues(spec)
    problems += check_auth(spec)
    return problems


def _check_isolation(tenant: TenantSpec, path: FieldPath) -> Iterator[SpecProblem]:
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
    catalog = fleet.catalog
    known = catalog.names()
    for n, node in enumerate(fleet.nodes):
        for g, group in enumerate(node.gpus):
            path: FieldPath = ("fleet", "nodes", n, "gpus", g)
            model = catalog.model(group.model)
            if model is None:
                yield SpecProblem(
                    (*path, "model"),
                    f"unknown GPU model {group.model!r}{did_you_mean(group.model, known)}"
                    f"; known models: {', '.join(known)} (add others under fleet.gpu_models)",
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


def _duplicates(names: list[str], path: FieldPath, what: str) -> Iterator[SpecProblem]:
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
        for w, name in enumerate(names):
            if name.startswith(JOB_WORKLOAD_PREFIX):
                yield SpecProblem(
                    ("tenants", t, "workloads", w, "name"),
                    f"workload name {name!r} starts with {JOB_WORKLOAD_PREFIX!r}, which is reserved "
                    "for the workloads jobs run as (job-<id>): its logs, status and placement "
                    f"would be taken for a job's; choose a name not starting with "
                    f"{JOB_WORKLOAD_PREFIX!r}",
                )


def _check_references(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    tenants = {tenant.name: tenant for tenant in spec.tenants}
    pools = fleet_pools(spec.fleet)
    for t, tenant in enumerate(spec.tenants):
        for i, other in enumerate(tenant.never_share_with):
            path: FieldPath = ("tenants", t, "never_share_with", i)
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
    tenants: dict[str, TenantSpec], tenant: TenantSpec, workload: WorkloadSpec, path: FieldPath
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
    if (owner_name, base_name) == (tenant.name, workload.name):
        yield SpecProblem(where, "lora_of names this workload itself: name the base server")
        return
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


def _check_runtime(workload: WorkloadSpec, path: FieldPath) -> Iterator[SpecProblem]:
    if workload.network is Network.NONE and (workload.serve or workload.health):
        yield SpecProblem(
            (*path, "network"),
            "network none leaves only loopback inside the workload: the gateway and health checks "
            "could not reach it; use network host for served workloads",
        )
    health = workload.health
    if health is not None and health.port is None and workload.serve is None:
        yield SpecProblem(
            (*path, "health", "port"),
            "a health check needs a port: give health.port, or serve (its port is checked)",
        )
    if workload.command is not None and not workload.command:
        yield SpecProblem(
            (*path, "command"), "command is empty: give the program and its arguments"
        )
    if workload.reads and workload.command is None and workload.image is None:
        where = (
            f"the server it rides on ({workload.serve.lora_of})"
            if workload.serve is not None and workload.serve.lora_of
            else "the workload whose command reads them"
        )
        yield SpecProblem(
            (*path, "reads"),
            f"reads grants folders to a workload's processes, and this one runs none (no command "
            f"or image): grant them on {where}",
        )


def _check_quota(tenant: TenantSpec, path: FieldPath) -> Iterator[SpecProblem]:
    """Requests that exceed the tenant's quota whatever GPU they land on. Each message names the
    workloads that count against the quota and what each asks."""
    quota = tenant.quota
    asking = [w for w in tenant.workloads if w.gpu is not None and w.replicas]
    whole = [(w, w.gpu.count) for w in asking if w.gpu and w.gpu.count]
    memory = [(w, w.gpu.memory_gib) for w in asking if w.gpu and w.gpu.memory_gib]
    compute = [(w, w.gpu.compute_percent) for w in asking if w.gpu and w.gpu.compute_percent]
    if quota.gpus is not None and _total(whole) > quota.gpus:
        yield SpecProblem(
            (*path, "quota", "gpus"),
            f"workloads ask for {_total(whole):g} whole GPUs, over the quota of {quota.gpus}: "
            + _each(whole, " GPU", plural=True),
        )
    if quota.gpu_memory_gib is not None and _total(memory) > quota.gpu_memory_gib:
        yield SpecProblem(
            (*path, "quota", "gpu_memory_gib"),
            f"workloads ask for {_total(memory):g} GiB of GPU memory, over the quota of "
            f"{quota.gpu_memory_gib:g}: " + _each(memory, " GiB"),
        )
    if quota.compute_percent is not None and _total(compute) > quota.compute_percent:
        yield SpecProblem(
            (*path, "quota", "compute_percent"),
            f"workloads ask for {_total(compute):g}% compute, over the quota of "
            f"{quota.compute_percent}%: " + _each(compute, "%"),
        )
    known_profiles = {p.name for m in GPU_MODELS if m.mig for p in m.mig.profiles}
    for profile, limit in quota.mig.items():
        if profile not in known_profiles:
            yield SpecProblem(
                (*path, "quota", "mig", profile),
                f"unknown MIG profile {profile!r}{did_you_mean(profile, known_profiles)}",
            )
            continue
        slices = [(w, 1) for w in asking if w.gpu and w.gpu.mig_profile == profile]
        if _total(slices) > limit:
            yield SpecProblem(
                (*path, "quota", "mig", profile),
                f"workloads ask for {_total(slices):g} x {profile}, over the quota of {limit}: "
                + _each(slices, ""),
            )


def _total(asks: Sequence[tuple[WorkloadSpec, float]]) -> float:
    return sum(ask * workload.replicas for workload, ask in asks)


def _each(asks: Sequence[tuple[WorkloadSpec, float]], unit: str, *, plural: bool = False) -> str:
    """`playground 5 replicas x 12 GiB = 60 GiB, embed 1 replica x 8 GiB = 8 GiB`; with no unit
    (a count of MIG slices) just `support-bot 3 replicas`."""
    parts = []
    for workload, ask in asks:
        total = ask * workload.replicas
        replicas = f"{workload.replicas} replica{'s' if workload.replicas > 1 else ''}"
        if unit:
            each, all_ = (f"{unit}s" if plural and n != 1 else unit for n in (ask, total))
            replicas += f" x {ask:g}{each} = {total:g}{all_}"
        parts.append(f"{workload.name} {replicas}")
    return ", ".join(parts)


def _check_gateway(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    gateway = spec.gateway
    if gateway.workers > 1 and gateway.limiter is LimiterBackend.MEMORY:
        yield SpecProblem(
            ("gateway", "workers"),
            f"{gateway.workers} workers with limiter: memory would give each worker its own "
            "limits (each tenant would get workers x its limit): set limiter: redis, or workers: 1",
        )
    servers = {
        f"{t.name}/{w.name}"
        for t in spec.tenants
        for w in t.workloads
        if w.serve is not None and not w.serve.lora_of
    }
    for name, urls in gateway.backends.items():
        if name not in servers:
            yield SpecProblem(
                ("gateway", "backends", name),
                f"no served workload {name!r} (tenant/workload){did_you_mean(name, servers)}",
            )
        for url in urls:
            if not url.startswith(("http://", "https://")):
                yield SpecProblem(
                    ("gateway", "backends", name), f"{url!r} is not an http:// or https:// URL"
                )
    for n, network in enumerate(gateway.metrics_from):
        if not _is_network(network):
            yield SpecProblem(
                ("gateway", "metrics_from", n), f"{network!r} is not a network like 10.0.0.0/8"
            )
    for t, tenant in enumerate(spec.tenants):
        seen: dict[str, str] = {}
        for w, workload in enumerate(tenant.workloads):
            if workload.serve is None:
                continue
            first = seen.setdefault(workload.serve.model, workload.name)
            if first != workload.name:
                yield SpecProblem(
                    ("tenants", t, "workloads", w, "serve", "model"),
                    f"model name {workload.serve.model!r} is already served by {first!r}: the "
                    "gateway routes by model name, so each must be unique within a tenant",
                )


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True
