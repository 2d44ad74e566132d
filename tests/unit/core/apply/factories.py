"""Small builders for tests of the apply core: bindings, desired replicas, GPU statuses, records and
observations, on H100-80GB GPUs whose UUIDs are `GPU-<index>` and MIG devices `MIG-<gpu>-<gi>`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuplex.core.apply.actions import (
    Blocked,
    CreateMigInstance,
    DestroyMigInstance,
    HostAction,
    StartMpsDaemon,
    StartWorkload,
    StopMpsDaemon,
    StopWorkload,
    VramStop,
)
from gpuplex.core.apply.diff import HostObservation, mig_key
from gpuplex.core.apply.model import (
    Binding,
    DesiredHost,
    GpuDesired,
    GpuStatus,
    MigInstanceStatus,
    MpsDaemonRecord,
    Phase,
    WorkloadDesired,
    WorkloadRecord,
)
from gpuplex.core.catalog import gpu_model
from gpuplex.core.plan.model import MigSlicePlan, Mode
from gpuplex.core.spec.runtime import RestartSpec
from gpuplex.core.spec.workloads import HealthCheckSpec

MODEL = "H100-80GB"


def mig_slice(profile: str, start: int) -> MigSlicePlan:
    """A slice of an H100-80GB, with the catalog's profile id and size."""
    model = gpu_model(MODEL)
    assert model is not None
    assert model.mig is not None
    found = next(p for p in model.mig.profiles if p.name == profile)
    return MigSlicePlan(
        profile=profile,
        profile_id=found.profile_id,
        start_slot=start,
        size_slots=found.memory_slices,
    )


def binding(
    mode: Mode,
    *gpus: int,
    mig: MigSlicePlan | None = None,
    memory_mib: int = 8192,
    thread_percent: int | None = None,
) -> Binding:
    return Binding(
        mode=mode,
        gpu_indices=list(gpus) or [0],
        mig=mig,
        memory_mib=memory_mib,
        thread_percent=thread_percent,
    )


def wanted(
    workload: str, where: Binding, *, tenant: str = "acme", replica: int = 0, **fields: Any
) -> WorkloadDesired:
    return WorkloadDesired(
        tenant=tenant,
        workload=workload,
        replica=replica,
        binding=where,
        argv=fields.pop("argv", ["serve", workload]),
        **fields,
    )


def restart(**fields: Any) -> RestartSpec:
    return RestartSpec.model_validate(fields)


def health(**fields: Any) -> HealthCheckSpec:
    return HealthCheckSpec.model_validate(fields)


def record(desired: WorkloadDesired, phase: Phase = Phase.RUNNING, **fields: Any) -> WorkloadRecord:
    live = phase in (Phase.STARTING, Phase.RUNNING)
    defaults: dict[str, Any] = {"pid": 4000 + desired.replica, "started_at_s": 0.0} if live else {}
    return WorkloadRecord(desired=desired, phase=phase, **{**defaults, **fields})


def gpu_desired(
    index: int, *, mig: Iterable[MigSlicePlan] | None = None, mps: bool = False
) -> GpuDesired:
    return GpuDesired(
        index=index, model=MODEL, mig_slices=list(mig) if mig is not None else None, mps=mps
    )


def host(gpus: Iterable[GpuDesired], workloads: Iterable[WorkloadDesired]) -> DesiredHost:
    return DesiredHost(node="n0", gpus=list(gpus), workloads=list(workloads))


def instance(gpu: int, where: MigSlicePlan, gi_id: int) -> MigInstanceStatus:
    return MigInstanceStatus(
        gi_id=gi_id,
        profile_id=where.profile_id,
        profile=where.profile,
        start_slot=where.start_slot,
        size_slots=where.size_slots,
        device_uuid=f"MIG-{gpu}-{gi_id}",
    )


def gpu_status(
    index: int,
    *,
    mig_enabled: bool = False,
    instances: Iterable[MigInstanceStatus] = (),
    lost: bool = False,
) -> GpuStatus:
    return GpuStatus(
        index=index,
        uuid=f"GPU-{index}",
        model=MODEL,
        memory_mib=81559,
        mig_enabled=mig_enabled,
        lost=lost,
        instances=list(instances),
    )


def mps_daemon(gpu_index: int) -> MpsDaemonRecord:
    return MpsDaemonRecord(
        gpu_index=gpu_index,
        gpu_uuid=f"GPU-{gpu_index}",
        pid=9000 + gpu_index,
        started_at_s=0.0,
        pipe_dir=f"/run/gpuplex/mps/{gpu_index}/pipe",
        log_dir=f"/run/gpuplex/mps/{gpu_index}/log",
    )


def observe(
    gpus: Iterable[GpuStatus],
    records: Iterable[WorkloadRecord] = (),
    *,
    mps_alive: dict[int, bool] | None = None,
    memory: dict[str, int] | None = None,
    users: dict[str, list[str]] | None = None,
    owned: dict[int, list[str]] | None = None,
) -> HostObservation:
    alive = mps_alive or {}
    return HostObservation(
        gpus=list(gpus),
        records=list(records),
        mps_daemons=[mps_daemon(index) for index in sorted(alive)],
        mps_alive=alive,
        gpu_memory_by_label=memory or {},
        device_users=users or {},
        owned_mig=owned or {},
    )


def matching_gpus(desired: DesiredHost) -> list[GpuStatus]:
    """Each desired GPU as it should be: MIG mode and gpuplex-created instances exactly as planned."""
    statuses = []
    for gpu in desired.gpus:
        slices = gpu.mig_slices or []
        statuses.append(
            gpu_status(
                gpu.index,
                mig_enabled=gpu.mig_slices is not None,
                instances=[instance(gpu.index, s, gi) for gi, s in enumerate(slices, 1)],
            )
        )
    return statuses


def settled(desired: DesiredHost, records: Iterable[WorkloadRecord] = ()) -> HostObservation:
    """A host whose GPUs, MIG instances and MPS daemons are as `desired` wants them."""
    return observe(
        matching_gpus(desired),
        records,
        mps_alive={g.index: True for g in desired.gpus if g.mps},
        owned={
            g.index: [mig_key(s.profile, s.start_slot) for s in g.mig_slices]
            for g in desired.gpus
            if g.mig_slices
        },
    )


def summary(actions: Iterable[HostAction]) -> list[tuple[object, ...]]:
    """Each action as a short tuple, in order: what a table of expectations compares."""
    out: list[tuple[object, ...]] = []
    for action in actions:
        match action:
            case StopWorkload(label=label, counts_as_exit=counts):
                out.append(("stop", label, counts))
            case VramStop(label=label):
                out.append(("vram", label))
            case DestroyMigInstance(gpu_index=gpu, profile=profile, start_slot=start):
                out.append(("destroy", gpu, mig_key(profile, start)))
            case CreateMigInstance(gpu_index=gpu, slice=s):
                out.append(("create", gpu, mig_key(s.profile, s.start_slot)))
            case StartMpsDaemon(gpu_index=gpu):
                out.append(("mps", gpu))
            case StopMpsDaemon(gpu_index=gpu):
                out.append(("mps-stop", gpu))
            case StartWorkload(desired=desired):
                out.append(("start", desired.label))
            case Blocked(target=target):
                out.append(("blocked", target))
    return out
