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


class NodeKind(NamedTuple):
    """What the one-method rule reads of a node: whether anything is placed on it, the methods
    its full GPUs run, and whether any of its GPUs is in MIG mode."""

    untouched: bool
    full_modes: frozenset[Mode]
    has_mig_mode: bool


def node_kind(states: list[GpuState], pinned_mig: bool) -> NodeKind:
    """The kind of a node with these GPU states; `pinned_mig`: one of its GPUs is `mig: "on"`."""
    untouched, has_mig_mode = True, pinned_mig
    full_modes: set[Mode] = set()
    for state in states:
        mode = state.mode  # None exactly when nothing is on the GPU
        if mode is not None:
            untouched = False
            if mode is Mode.MIG:
                has_mig_mode = True
            else:
                full_modes.add(mode)
    return NodeKind(untouched, frozenset(full_modes), has_mig_mode)


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

    `kinds` is each node as the index last changed it (`refresh` after every change the index
    makes): `problem` reads it, and the index's lists of free GPUs by node kind follow it.
    `problem_now` reads the node's states as they are, for a preemption trial that lifts replicas
    off a GPU's state without the index."""

    def __init__(self, states: list[GpuState]) -> None:
        self._on_node: dict[str, list[GpuState]] = {}
        for state in states:
            self._on_node.setdefault(state.slot.node, []).append(state)
        self._pinned_mig = {  # a GPU with `mig: "on"` is in MIG mode even while empty
            node: any(s.slot.runs_mig and not s.slot.runs_whole for s in on_node)
            for node, on_node in self._on_node.items()
        }
        self.kinds = {node: self._kind_now(node) for node in self._on_node}

    def _kind_now(self, node: str) -> NodeKind:
        return node_kind(self._on_node[node], self._pinned_mig[node])

    def states_on(self, node: str) -> list[GpuState]:
        return self._on_node[node]

    def refresh(self, node: str) -> tuple[NodeKind, NodeKind]:
        """The node's kind before and after a change the index made to one of its GPUs."""
        before, after = self.kinds[node], self._kind_now(node)
        self.kinds[node] = after
        return before, after

    def problem(self, unit: Unit, node: str) -> str | None:
        """Why `node` cannot take the unit's mode now, or None when it can."""
        return kind_problem(unit.mode, self.kinds[node])

    def problem_now(self, unit: Unit, node: str) -> str | None:
        """`problem` from the node's states as they are, changed by the index or not."""
        return kind_problem(unit.mode, self._kind_now(node))
