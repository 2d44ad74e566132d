"""Value types of the GPU catalog: GPU models, MIG profiles and where each profile may be placed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Provenance(StrEnum):
    """How sure we are of a fact. Nothing here was observed by gpuplex on hardware yet."""

    DOCUMENTED = "documented"  # NVIDIA's own documentation states it
    PUBLIC_LISTING = "public_listing"  # seen in real nvidia-smi / NVML output published by others
    INFERRED = "inferred"  # our reading: same silicon, same fractions; verify on hardware
    SPEC = "spec"  # a model the spec adds (fleet.gpu_models), as its operator wrote it


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A GPU-instance profile: `3g.40gb` takes 3 of 7 compute slices and 4 of 8 memory slices."""

    name: str
    profile_id: int  # the ID `nvidia-smi mig -lgip` prints and NVML's GpuInstanceProfileInfo.id
    compute_slices: int
    memory_slices: int  # also the placement size
    memory_mib: int
    max_count: int
    starts: tuple[int, ...]  # valid placement starts, counted in memory slices
    provenance: Provenance

    @property
    def single_instance(self) -> bool:
        """At most one per GPU (the +me variants, 4g, 7g). Other maxima follow from the starts."""
        return self.max_count == 1

    @property
    def is_variant(self) -> bool:
        """A `+me` (media extensions) variant of a base profile."""
        return "+" in self.name


@dataclass(frozen=True, slots=True)
class MigGeometry:
    compute_slices: int  # 7 on A100/H100/H200/B200, 4 on A30
    memory_slices: int  # 8 on A100/H100/H200/B200, 4 on A30
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        for profile in self.profiles:
            if profile.name == name:
                return profile
        return None

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        """By the id NVML and `nvidia-smi mig -lgip` use (19, 15, 9...)."""
        for profile in self.profiles:
            if profile.profile_id == profile_id:
                return profile
        return None


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str  # the catalog key used in gpuplex.yaml, e.g. "H100-80GB"
    memory_mib: int
    sm_count: int
    mig: MigGeometry | None  # None: the card has no MIG
    nvml_names: tuple[str, ...]  # device names NVML reports, for discovery
    provenance: Provenance

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / 1024
