"""Hand-made plans for metering tests: only the fields metering reads matter."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpuplex.core.plan import GpuView, MigSlicePlan, Mode, Placement, Plan, Summary

T0 = datetime(2025, 3, 1, tzinfo=UTC)
MODEL = "H100-80GB"


def hours(n: float) -> datetime:
    return T0 + timedelta(hours=n)


def placement(
    tenant: str,
    mode: Mode,
    compute_percent: int,
    *,
    gpus: tuple[int, ...] = (0,),
    profile: str | None = None,
    replica: int = 0,
    workload: str = "w",
) -> Placement:
    mig = (
        MigSlicePlan(profile=profile, profile_id=9, start_slot=0, size_slots=4) if profile else None
    )
    return Placement(
        tenant=tenant,
        workload=workload,
        replica=replica,
        mode=mode,
        node="n0",
        gpu_indices=list(gpus),
        gpu_model=MODEL,
        mig=mig,
        memory_mib=1024,
        thread_percent=compute_percent if mode is Mode.MPS else None,
        compute_percent=compute_percent,
        reason="test",
    )


def plan(*placements: Placement, gpu_count: int = 2) -> Plan:
    return Plan(
        policy="binpack",
        summary=Summary(
            gpus_total=gpu_count,
            gpus_used=0,
            replicas_placed=len(placements),
            replicas_infeasible=0,
            preemptions=0,
            moves=0,
        ),
        decisions=[],
        placements=list(placements),
        gpus=[
            GpuView(node="n0", index=i, model=MODEL, mode=None, memory_mib=81559, occupants=[])
            for i in range(gpu_count)
        ],
    )
