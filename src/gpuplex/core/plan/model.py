"""The Plan value: what the planner decided, serialisable to JSON and back (docs/plan-format.md)."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Mode(StrEnum):
    """The isolation a workload actually gets (`auto` is resolved to one of these)."""

    DEDICATED = "dedicated"
    MIG = "mig"
    MPS = "mps"
    TIMESLICE = "timeslice"


class PlanModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def replica_label(tenant: str, workload: str, replica: int) -> str:
    """How a replica is named everywhere a person reads it: `tenant/workload#replica`."""
    return f"{tenant}/{workload}#{replica}"


class UnitKey(PlanModel):
    """One replica of one workload: the unit the planner places."""

    tenant: str
    workload: str
    replica: int

    def label(self) -> str:
        return replica_label(self.tenant, self.workload, self.replica)


class MigSlicePlan(PlanModel):
    profile: str
    profile_id: int
    start_slot: int  # first memory slot it occupies (NVML placement.start)
    size_slots: int  # memory slots it occupies (NVML placement.size)


class RoundedUp(PlanModel):
    """A memory request granted as a fixed size larger than asked: the smallest MIG profile that
    holds it (and the compute asked), or whole GPUs for a dedicated replica."""

    requested_memory_mib: int
    requested_compute_percent: int | None = None
    granted: str  # the MIG profile, or "whole GPU" / "2 whole GPUs"
    granted_memory_mib: int
    smaller: str | None = None  # the next smaller MIG profile, which does not hold the request
    smaller_memory_mib: int | None = None


class Placement(UnitKey):
    mode: Mode
    node: str
    gpu_indices: list[int]  # one GPU except for multi-GPU dedicated replicas
    gpu_model: str
    mig: MigSlicePlan | None = None
    memory_mib: int  # GPU memory this replica holds or may pin
    thread_percent: int | None = None  # MPS active thread percentage
    compute_percent: int  # share of one GPU's SMs, 100 per whole GPU
    reason: str
    rounded_up: RoundedUp | None = None  # set when the grant is larger than the memory asked


class Decision(PlanModel):
    tenant: str
    workload: str
    mode: Mode
    reason: str


class Infeasible(UnitKey):
    reasons: list[str]


class Preemption(UnitKey):
    by: str  # the unit label that needed the room
    reason: str


class Move(UnitKey):
    """A kept replica that must restart elsewhere: another node or GPU, another MIG slice on the
    same GPU, or another mode."""

    from_node: str
    from_gpu_indices: list[int]
    from_mode: Mode
    from_mig: MigSlicePlan | None = None
    to_node: str
    to_gpu_indices: list[int]
    to_mode: Mode
    to_mig: MigSlicePlan | None = None


class MigReconfiguration(PlanModel):
    node: str
    gpu_index: int
    before: list[str]  # "profile@start"
    after: list[str]


class Occupant(UnitKey):
    mig: MigSlicePlan | None = None
    memory_mib: int
    thread_percent: int | None = None


class GpuView(PlanModel):
    node: str
    index: int
    model: str
    uuid: str | None = None
    pool: str | None = None
    mode: Mode | None  # None: idle
    memory_mib: int
    occupants: list[Occupant]


class Summary(PlanModel):
    gpus_total: int
    gpus_used: int
    replicas_placed: int
    replicas_infeasible: int
    preemptions: int
    moves: int


class Plan(PlanModel):
    format_version: Literal[1] = 1
    policy: str
    summary: Summary
    decisions: list[Decision]
    placements: list[Placement]
    infeasible: list[Infeasible] = Field(default_factory=list)
    preemptions: list[Preemption] = Field(default_factory=list)
    moves: list[Move] = Field(default_factory=list)
    mig_reconfigurations: list[MigReconfiguration] = Field(default_factory=list)
    gpus: list[GpuView]
