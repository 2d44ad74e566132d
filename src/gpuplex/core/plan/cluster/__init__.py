"""Cluster placement over a trace of nodes and pods: the state and the placement policies (pure)."""

from __future__ import annotations

from gpuplex.core.plan.cluster.model import MILLI, ClusterState, TraceNode, TracePod
from gpuplex.core.plan.cluster.policies import (
    POLICIES,
    Choice,
    Policy,
    choose,
    policy_named,
)

__all__ = [
    "MILLI",
    "POLICIES",
    "Choice",
    "ClusterState",
    "Policy",
    "TraceNode",
    "TracePod",
    "choose",
    "policy_named",
]
