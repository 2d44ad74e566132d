"""The plan's target, and the one rule a Kubernetes target adds: one sharing method per node.

The NVIDIA device plugin shares all full GPUs of a node (every GPU not in MIG mode) one way: not at
all (whole GPUs), by MPS or by time-slicing, and it does not run MPS on a node with MIG. So on
Kubernetes a node's full GPUs take one of `dedicated`, `mps` or `timeslice` replicas, fixed by the
first one placed there, and MPS goes only to nodes with no GPU in MIG mode (a planned slice or a
`mig: "on"` GPU); MIG slices go only to nodes whose full GPUs do not run MPS. A host target has no
such rule: each GPU runs what it runs.

`problem` reads the node's GPU states as they are when asked, so it holds while the planner lifts
replicas off a GPU to try a preemption. The rule depends on a node only through its kind
(`NodeKind`: anything placed, its full GPUs' methods, any GPU in MIG mode), of which a fleet has a
handful; the index files its empty GPUs by their node's kind, so that finding the first free GPU a
mode may take asks each kind once instead of each node. Where the rule leaves a choice, the index
takes an empty GPU on a node already in use before one on an untouched node (index.py), so that
untouched nodes stay free for the methods still to come.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from gpuplex.core.plan.demand import Unit
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.occupancy import GpuState
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.target import Target

ONE_METHOD = "Kubernetes's device plugin runs one sharing method per node"
NO_MPS_BESIDE_MIG = "Kubernetes's device plugin runs no MPS on a node with MIG"


def target_of(spec: GpuplexSpec) -> Target:
    """Kubernetes when the spec writes a `kubernetes:` section (even an empty one), else host."""
    return Target.KUBERNETES if "kubernetes" in spec.model_fields_set else Target.HOST


def in_mig_mode(state: GpuState) -> bool:
    """Holds MIG slices, or is pinned to MIG mode by `mig: "on"` even while empty."""
    return state.mode is Mode.MIG or (state.slot.runs_mig and not state.slot.runs_whole)


class NodeKind(NamedTuple):
    """What the one-method rule reads of a node: whether anything is placed on it, the methods
    its full GPUs run, and whether any of its GPUs is in MIG mode."""

    untouched: bool
    full_modes: frozenset[Mode]
    has_mig_mode: bool


def kind_of(states: list[GpuState]) -> NodeKind:
    return NodeKind(
        untouched=all(s.is_empty for s in states),
        full_modes=frozenset(
            s.mode for s in states if s.mode is not None and s.mode is not Mode.MIG
        ),
        has_mig_mode=any(in_mig_mode(s) for s in states),
    )


@cache
def kind_problem(mode: Mode, kind: NodeKind) -> str | None:
    """Why a node of this kind cannot take `mode` now, or None when it can."""
    if mode is Mode.MIG:
        return (
            f"its node's full GPUs run mps; {NO_MPS_BESIDE_MIG}"
            if Mode.MPS in kind.full_modes
            else None
        )
    other = sorted(kind.full_modes - {mode})
    if other:
        return f"its node's full GPUs run {other[0]}; {ONE_METHOD}"
    if mode is Mode.MPS and kind.has_mig_mode:
        return f"its node has GPUs in MIG mode; {NO_MPS_BESIDE_MIG}"
    return None


@cache
def kind_verdict(mode: Mode, kind: NodeKind) -> int:
    """For a free GPU on a node of this kind: 0, the node may not take `mode`; 1, it may and
    is untouched; 2, it may and is already in use (taken first: index.py)."""
    return 0 if kind_problem(mode, kind) else 1 if kind.untouched else 2


class NodeSharing:
    """Which replica modes each node's GPUs may still take under the one-method rule.

    `problem` reads the node's states as they are when asked (preemption lifts replicas off a
    GPU's state to try a fit, without the index). `kinds` is what the index last saw of each
    node (`refresh` after every change it makes): its lists of free GPUs by node kind use it."""

    def __init__(self, states: list[GpuState]) -> None:
        self._on_node: dict[str, list[GpuState]] = {}
        for state in states:
            self._on_node.setdefault(state.slot.node, []).append(state)
        self.kinds = {node: kind_of(on_node) for node, on_node in self._on_node.items()}

    def states_on(self, node: str) -> list[GpuState]:
        return self._on_node[node]

    def refresh(self, node: str) -> tuple[NodeKind, NodeKind]:
        """The node's kind before and after a change the index made to one of its GPUs."""
        before, after = self.kinds[node], kind_of(self._on_node[node])
        self.kinds[node] = after
        return before, after

    def problem(self, unit: Unit, node: str) -> str | None:
        """Why `node` cannot take the unit's mode now, or None when it can."""
        return kind_problem(unit.mode, kind_of(self._on_node[node]))
