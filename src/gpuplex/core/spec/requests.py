"""Cross-field rules about what a workload asks for: is it possible on the GPUs its pool rule
allows (model, MIG capability, memory, GPUs on one node), and does it fit the tenant's isolation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from gpuplex.core.catalog import GpuModel
from gpuplex.core.plural import counted
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import runs_mig, runs_whole
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.core.spec.pools import fleet_pools, gpu_pool, pool_accepts, workload_pool
from gpuplex.core.spec.tenants import Isolation, TenantSpec
from gpuplex.core.spec.workloads import GpuRequestSpec, WorkloadSpec
from gpuplex.errors import FieldPath, SpecProblem


@dataclass(frozen=True, slots=True)
class CandidateModel:
    """The GPUs of one model that a workload's pool rule allows, as far as validation cares."""

    model: GpuModel
    mig_ok: bool  # some of them can hold MIG slices
    whole_ok: bool  # some of them can run without MIG (dedicated, MPS, time-slicing)
    most_whole_on_one_node: int  # for whole-GPU requests


class CandidateFinder:
    """Candidate GPUs per pool, computed once per pool (the fleet is walked once per pool)."""

    def __init__(self, spec: GpuplexSpec) -> None:
        self.spec = spec
        self.catalog = spec.fleet.catalog
        self.pools = fleet_pools(spec.fleet)
        self.by_pool: dict[str | None, list[CandidateModel]] = {}

    def __call__(self, workload: WorkloadSpec) -> list[CandidateModel]:
        wanted = workload_pool(self.pools, workload)
        if wanted not in self.by_pool:
            self.by_pool[wanted] = self._find(wanted)
        return self.by_pool[wanted]

    def _find(self, wanted: str | None) -> list[CandidateModel]:
        seen: dict[GpuModel, tuple[bool, bool]] = {}
        most_whole: Counter[GpuModel] = Counter()
        for node in self.spec.fleet.nodes:
            whole_here: Counter[GpuModel] = Counter()
            for group in node.gpus:
                model = self.catalog.model(group.model)
                if model is None or not pool_accepts(gpu_pool(node, group), wanted):
                    continue
                mig_ok, whole_ok = seen.get(model, (False, False))
                seen[model] = (mig_ok or runs_mig(model, group.mig), whole_ok)
                if runs_whole(model, group.mig):
                    seen[model] = (seen[model][0], True)
                    whole_here[model] += group.count
            for model, count in whole_here.items():
                most_whole[model] = max(most_whole[model], count)
        return [
            CandidateModel(model, mig_ok, whole_ok, most_whole[model])
            for model, (mig_ok, whole_ok) in seen.items()
        ]


def check_request(
    spec: GpuplexSpec,
    tenant: TenantSpec,
    workload: WorkloadSpec,
    path: FieldPath,
    candidates_for: CandidateFinder,
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
        catalog = candidates_for.catalog
        if catalog.model(request.model) is None:
            yield SpecProblem(
                (*where, "model"),
                f"unknown GPU model {request.model!r}{did_you_mean(request.model, catalog.names())}",
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
        most = max(c.most_whole_on_one_node for c in usable)
        if request.count > most:
            yield SpecProblem(
                (*where, "count"),
                f"{counted(request.count, 'GPU')} on one node, but no node has more than "
                f"{counted(most, 'candidate GPU')}",
            )


def _check_mig_request(
    request: GpuRequestSpec, candidates: list[CandidateModel], where: FieldPath
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
    catalog = spec.fleet.catalog
    return bool(models) and all(catalog.model(model) is not None for model in models)


def _pool_is_unknown(spec: GpuplexSpec, workload: WorkloadSpec) -> bool:
    return workload.pool is not None and workload.pool not in fleet_pools(spec.fleet)
