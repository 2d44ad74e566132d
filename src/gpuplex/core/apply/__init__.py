"""Applying a plan to one host, decided purely: desired state, diff against what is observed,
restart policy, the VRAM watchdog's rule and the commands that launch a replica."""

from __future__ import annotations

from gpuplex.core.apply.actions import HostAction, describe
from gpuplex.core.apply.desired import desired_host, port_clashes
from gpuplex.core.apply.diff import HostObservation, diff, forget_removed, mig_key
from gpuplex.core.apply.model import (
    Binding,
    DesiredHost,
    ExitStatus,
    GpuDesired,
    GpuProcessStatus,
    GpuStatus,
    MigInstanceStatus,
    MpsDaemonRecord,
    Phase,
    WorkloadDesired,
    WorkloadRecord,
)
from gpuplex.core.apply.restart import after_exit, after_health_check

__all__ = [
    "Binding",
    "DesiredHost",
    "ExitStatus",
    "GpuDesired",
    "GpuProcessStatus",
    "GpuStatus",
    "HostAction",
    "HostObservation",
    "MigInstanceStatus",
    "MpsDaemonRecord",
    "Phase",
    "WorkloadDesired",
    "WorkloadRecord",
    "after_exit",
    "after_health_check",
    "describe",
    "desired_host",
    "diff",
    "forget_removed",
    "mig_key",
    "port_clashes",
]
