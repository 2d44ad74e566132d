"""`fleet.discover: true`: the host's own GPUs, as the driver reports them, become the fleet's node."""

from __future__ import annotations

from itertools import groupby

from gpuplex.core.apply.model import GpuStatus
from gpuplex.core.catalog import gpu_model, gpu_model_names
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fleet import FleetSpec, GpuGroupSpec, MigModeSpec, NodeSpec
from gpuplex.core.spec.rules import check_spec
from gpuplex.errors import SpecProblem


def discovered_node(name: str, gpus: list[GpuStatus]) -> NodeSpec | list[SpecProblem]:
    """One node with the GPUs in index order, grouped by model and MIG mode, with their UUIDs."""
    problems = [
        SpecProblem(
            ("fleet", "discover"),
            f"GPU {gpu.index} is a {gpu.model!r}, which the catalog does not know "
            f"({', '.join(gpu_model_names())}): list the fleet under fleet.nodes instead",
        )
        for gpu in gpus
        if gpu_model(gpu.model) is None
    ]
    if not gpus:
        problems.append(
            SpecProblem(("fleet", "discover"), "the driver reports no GPU on this host")
        )
    if problems:
        return problems
    ordered = sorted(gpus, key=lambda g: g.index)
    groups = [
        GpuGroupSpec(
            model=model,
            count=len(members),
            uuids=[g.uuid for g in members],
            mig=MigModeSpec.ON if mig else MigModeSpec.OFF,
        )
        for (model, mig), run in groupby(ordered, key=lambda g: (g.model, g.mig_enabled))
        for members in [list(run)]
    ]
    return NodeSpec(name=name, gpus=groups)


def with_discovered_fleet(spec: GpuplexSpec, node: NodeSpec) -> GpuplexSpec | list[SpecProblem]:
    """The spec with its fleet filled in, re-checked: requests must fit the GPUs actually found."""
    fleet = FleetSpec(discover=True, nodes=[node], gpu_models=spec.fleet.gpu_models)
    filled = spec.model_copy(update={"fleet": fleet})
    problems = check_spec(filled)
    return problems if problems else filled
