"""`fleet.gpu_models`: cards the built-in catalog does not list (A40, L40, RTX 6000 Ada, H20...),
added by the spec without editing gpuplex. An added card has no MIG: it runs dedicated, MPS or
time-sliced; MIG geometry comes only from the built-in catalog (`gpuplex catalog`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictFloat, StrictInt, field_validator
from pydantic.json_schema import SkipJsonSchema

from gpuplex.core.catalog import GpuModel, Provenance
from gpuplex.core.spec.fields import SpecModel

MIB_PER_GIB = 1024


class GpuModelSpec(SpecModel):
    """One card: its name as the fleet and workloads write it, its memory and its SMs."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,62}$",
        description="The name fleet.nodes[].gpus[].model and workloads' gpu.model use, e.g. L40; "
        "not a built-in model's.",
    )
    memory_gib: StrictFloat | None = Field(
        default=None, gt=0, le=4096, description="GPU memory in GiB (or memory_mib)."
    )
    memory_mib: StrictInt | None = Field(
        default=None, ge=1, le=4096 * MIB_PER_GIB, description="GPU memory in MiB (or memory_gib)."
    )
    sm_count: StrictInt = Field(ge=1, le=4096, description="Streaming multiprocessors.")
    # Not part of the format: present only to say why MIG cannot be declared here.
    mig: SkipJsonSchema[Any] = Field(default=None, exclude=True)

    @field_validator("mig", mode="before")
    @classmethod
    def _no_mig(cls, value: object) -> None:
        if value is None:
            return None
        raise ValueError(
            "an added GPU model has no MIG: MIG profiles and placements come only from the "
            "built-in catalog (`gpuplex catalog`); remove mig, and use a built-in model for a "
            "MIG-capable card"
        )

    @property
    def total_memory_mib(self) -> int | None:
        if self.memory_mib is not None:
            return self.memory_mib
        if self.memory_gib is not None:
            return round(self.memory_gib * MIB_PER_GIB)
        return None

    def to_model(self) -> GpuModel:
        return GpuModel(
            name=self.name,
            memory_mib=self.total_memory_mib or 0,  # validation refuses an entry without memory
            sm_count=self.sm_count,
            mig=None,
            nvml_names=(),
            provenance=Provenance.SPEC,
        )
