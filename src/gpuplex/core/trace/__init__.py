"""Cluster placement over a trace of nodes and pods: the state and the placement policies (pure)."""

from __future__ import annotations

from gpuplex.core.fragmentation.model import MILLI, TracePod
from gpuplex.core.trace.model import ClusterState, TraceNode
from gpuplex.core.trace.policies import (
    POLICIES,
    Choice,
    Policy,
    choose,
)
from gpuplex.core.trace.registry import POLICY_NAMES, policy_named

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
