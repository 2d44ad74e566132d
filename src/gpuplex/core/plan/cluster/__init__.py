"""Cluster placement over a trace of nodes and pods: the state and the placement policies (pure)."""

from __future__ import annotations

from gpuplex.core.plan.cluster.model import MILLI, ClusterState, TraceNode, TracePod
from gpuplex.core.plan.cluster.policies import (
    POLICIES,
    Choice,
    Policy,
    choose,
)
from gpuplex.core.plan.cluster.registry import POLICY_NAMES, policy_named

__all__ = [
    "MILLI",
    "POLICIES",
    "POLICY_NAMES",
    "Choice",
    "ClusterState",
    "Policy",
    "TraceNode",
    "TracePod",
    "choose",
    "policy_named",
]
