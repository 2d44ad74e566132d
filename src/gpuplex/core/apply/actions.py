"""What the reconcile loop does to a host, in the order `diff` returns it: stop, destroy MIG
instances, create them, start MPS daemons, start replicas. Each action says why."""

from __future__ import annotations

from typing import Literal

from gpuplex.core.apply.model import ApplyModel, WorkloadDesired
from gpuplex.core.plan.model import MigSlicePlan


class StopWorkload(ApplyModel):
    kind: Literal["stop_workload"] = "stop_workload"
    label: str
    reason: str
    counts_as_exit: (
        bool  # True: restart policy and backoff apply; False: a clean stop (spec changed)
    )


class VramStop(ApplyModel):
    """The VRAM watchdog stops a replica that uses more GPU memory than its plan allows."""

    kind: Literal["vram_stop"] = "vram_stop"
    label: str
    tenant: str
    workload: str
    planned_mib: int
    observed_mib: int
    limit_mib: int


class DestroyMigInstance(ApplyModel):
    kind: Literal["destroy_mig_instance"] = "destroy_mig_instance"
    gpu_index: int
    gi_id: int
    profile: str
    start_slot: int
    reason: str


class CreateMigInstance(ApplyModel):
    kind: Literal["create_mig_instance"] = "create_mig_instance"
    gpu_index: int
    slice: MigSlicePlan


class StartMpsDaemon(ApplyModel):
    kind: Literal["start_mps_daemon"] = "start_mps_daemon"
    gpu_index: int
    reason: str


class StopMpsDaemon(ApplyModel):
    kind: Literal["stop_mps_daemon"] = "stop_mps_daemon"
    gpu_index: int
    reason: str


class StartWorkload(ApplyModel):
    kind: Literal["start_workload"] = "start_workload"
    desired: WorkloadDesired
    reason: str


class Blocked(ApplyModel):
    """Something the loop may not do by itself; the reason says what the operator can do."""

    kind: Literal["blocked"] = "blocked"
    target: str
    reason: str


#: One thing the reconcile loop does to a host (not a control-plane Permission, nor a Kubernetes
#: object's ObjectAction).
HostAction = (
    StopWorkload
    | VramStop
    | DestroyMigInstance
    | CreateMigInstance
    | StartMpsDaemon
    | StopMpsDaemon
    | StartWorkload
    | Blocked
)


def describe(action: HostAction) -> str:
    """One line a person reads in `--dry-run` output and the event log."""
    match action:
        case StopWorkload(label=label, reason=reason):
            return f"stop {label}: {reason}"
        case VramStop(label=label, planned_mib=planned, observed_mib=observed, limit_mib=limit):
            return (
                f"stop {label}: VRAM watchdog: uses {observed} MiB, planned {planned} MiB "
                f"(limit {limit} MiB)"
            )
        case DestroyMigInstance(gpu_index=gpu, gi_id=gi, profile=profile, start_slot=start):
            return f"destroy MIG instance {gi} ({profile}@{start}) on GPU {gpu}: {action.reason}"
        case CreateMigInstance(gpu_index=gpu, slice=mig):
            return f"create MIG instance {mig.profile}@{mig.start_slot} on GPU {gpu}"
        case StartMpsDaemon(gpu_index=gpu, reason=reason):
            return f"start the MPS control daemon of GPU {gpu}: {reason}"
        case StopMpsDaemon(gpu_index=gpu, reason=reason):
            return f"stop the MPS control daemon of GPU {gpu}: {reason}"
        case StartWorkload(desired=wanted, reason=reason):
            return f"start {wanted.label} on {wanted.binding.describe()}: {reason}"
        case Blocked(target=target, reason=reason):
            return f"blocked: {target}: {reason}"
