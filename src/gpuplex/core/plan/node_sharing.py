"""The plan's target, and the one rule a Kubernetes target adds: one sharing method per node.

The NVIDIA device plugin shares all full GPUs of a node (every GPU not in MIG mode) one way: not at
all (whole GPUs), by MPS or by time-slicing, and it does not run MPS on a node with MIG. So on
Kubernetes a node's full GPUs take one of `dedicated`, `mps` or `timeslice` replicas, fixed by the
first one placed there, and MPS goes only to nodes with no GPU in MIG mode (a planned slice or a
`mig: "on"` GPU); MIG slices go only to nodes whose full GPUs do not run MPS. A host target has no
such rule: each GPU runs what it runs.

The rule reads the node's GPU states as they are when asked, so it holds while the planner lifts
replicas off a GPU to try a preemption, and needs no bookkeeping of its own. Where the rule leaves a
choice, the index takes an empty GPU on a node already in use before one on an untouched node
(index.py), so that untouched nodes stay free for the methods still to come.
"""

from __future__ import annotations

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


class NodeSharing:
    """Which replica modes each node's GPUs may still take under the one-method rule."""

    def __init__(self, states: list[GpuState]) -> None:
        self._on_node: dict[str, list[GpuState]] = {}
        for state in states:
            self._on_node.setdefault(state.slot.node, []).append(state)

    def untouched(self, node: str) -> bool:
        """Nothing placed on the node yet: it may still take any method."""
        return all(s.is_empty for s in self._on_node[node])

    def problem(self, unit: Unit, node: str) -> str | None:
        """Why `node` cannot take the unit's mode now, or None when it can."""
        states = self._on_node[node]
        full = {s.mode for s in states if s.mode is not None and s.mode is not Mode.MIG}
        if unit.mode is Mode.MIG:
            return (
                f"its node's full GPUs run mps; {NO_MPS_BESIDE_MIG}" if Mode.MPS in full else None
            )
        other = sorted(full - {unit.mode})
        if other:
            return f"its node's full GPUs run {other[0]}; {ONE_METHOD}"
        if unit.mode is Mode.MPS and any(in_mig_mode(s) for s in states):
            return f"its node has GPUs in MIG mode; {NO_MPS_BESIDE_MIG}"
        return None
