"""Isolation choice, placement, quotas and admission, preemption, explanations: all pure."""

from __future__ import annotations

from gpuplex.core.plan.model import (
    Decision,
    GpuView,
    Infeasible,
    MigReconfiguration,
    MigSlicePlan,
    Mode,
    Move,
    Occupant,
    Placement,
    Plan,
    Preemption,
    RoundedUp,
    Summary,
)
from gpuplex.core.plan.node_sharing import target_of
from gpuplex.core.plan.placer import make_plan
from gpuplex.core.target import Target

__all__ = [
    "Decision",
    "GpuView",
    "Infeasible",
    "MigReconfiguration",
    "MigSlicePlan",
    "Mode",
    "Move",
    "Occupant",
    "Placement",
    "Plan",
    "Preemption",
    "RoundedUp",
    "Summary",
    "Target",
    "make_plan",
    "target_of",
]
