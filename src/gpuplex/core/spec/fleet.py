"""The fleet: nodes, their GPUs and pools."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictInt

from gpuplex.core.catalog import Catalog, GpuModel, gpu_model_names
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.gpu_models import GpuModelSpec


class MigModeSpec(StrEnum):
    """Whether a GPU may run in MIG mode. `auto`: the planner decides per GPU (MIG-capable models only);
    switching the mode on a host stays an explicit operator action."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class GpuGroupSpec(SpecModel):
    model: str = Field(
        description="A GPU model from the catalog ("
        + ", ".join(gpu_model_names())
        + "), or one of fleet.gpu_models.",
        examples=gpu_model_names(),
    )
    count: StrictInt = Field(default=1, ge=1, le=64)
    uuids: list[str] | None = Field(default=None, description="One UUID per GPU, in index order.")
    mig: MigModeSpec = MigModeSpec.AUTO
    pool: DnsLabel | None = Field(default=None, description="Overrides the node's pool.")


class NodeSpec(SpecModel):
    name: DnsLabel
    gpus: list[GpuGroupSpec] = Field(min_length=1)
    cpu_cores: StrictInt | None = Field(default=None, ge=1)
    memory_gib: StrictInt | None = Field(default=None, ge=1)
    pool: DnsLabel | None = Field(default=None, description="e.g. long-running or bursty.")


class FleetSpec(SpecModel):
    discover: bool = Field(
        default=False,
        description="Fill the nodes from NVML on the host (the host runtime does this).",
    )
    nodes: list[NodeSpec] = Field(default_factory=list)
    gpu_models: list[GpuModelSpec] = Field(
        default_factory=list,
        description="Cards the built-in catalog does not list (no MIG): name, memory, SMs.",
    )

    @property
    def catalog(self) -> Catalog:
        """The models this fleet may name: the built-in catalog and its gpu_models."""
        return Catalog(tuple(entry.to_model() for entry in self.gpu_models))


def runs_mig(model: GpuModel, policy: MigModeSpec) -> bool:
    """A GPU can hold MIG slices: the model has MIG and the group is not `mig: off`."""
    return model.mig is not None and policy is not MigModeSpec.OFF


def runs_whole(model: GpuModel, policy: MigModeSpec) -> bool:
    """A GPU can run without MIG (dedicated, MPS, time-slicing): it is not `mig: on`. A card
    without MIG counts as able whatever it says (`mig: on` there is reported by validation)."""
    return policy is not MigModeSpec.ON or model.mig is None
