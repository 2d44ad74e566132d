"""Map what NVML reports (device names, GPU-instance profile ids) to gpuplex catalog names.

Pure functions over the catalog: no NVML here, so the mapping is testable without a GPU."""

from __future__ import annotations

import re

from gpuplex.core.catalog import GPU_MODELS, GpuModel, gpu_model, gpu_model_for_nvml_name

#: Words NVML puts before the family name ("NVIDIA GeForce RTX 4090", "Tesla T4").
_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "QUADRO"})

#: A catalog model's memory suffix: "-80GB" in "H100-80GB".
_MEMORY_SUFFIX = re.compile(r"-\d+GB$")

#: How far the memory NVML reports may be from the catalog's and still be that model. Real cards
#: report a little less than nominal (an A100-SXM4-40GB reports 40536 MiB of 40960).
_MEMORY_TOLERANCE = 0.10


def _tokens(text: str) -> list[str]:
    return [word for word in re.split(r"[\s\-_]+", text.upper()) if word]


def _family(model: GpuModel) -> list[str]:
    """The words a catalog model's family is written with: "H100-80GB" -> ["H100"],
    "RTX-4090" -> ["RTX", "4090"]."""
    return _tokens(_MEMORY_SUFFIX.sub("", model.name))


def model_from_nvml_name(nvml_name: str, memory_mib: int) -> str:
    """The catalog model name for a device as NVML names it, else the NVML name unchanged.

    An exact match on the catalog's known NVML names wins. Otherwise the family words must start the
    NVML name (after "NVIDIA", "Tesla", "GeForce") and the memory must be within 10% of the catalog's;
    of several candidates ("H100 NVL": H100-80GB or H100-94GB) the closest memory size wins.
    """
    exact = gpu_model_for_nvml_name(nvml_name)
    if exact is not None:
        return exact.name
    words = [word for word in _tokens(nvml_name) if word not in _VENDOR_WORDS]
    best: GpuModel | None = None
    for model in GPU_MODELS:
        family = _family(model)
        if words[: len(family)] != family:
            continue
        if abs(memory_mib - model.memory_mib) > model.memory_mib * _MEMORY_TOLERANCE:
            continue
        if best is None or abs(memory_mib - model.memory_mib) < abs(memory_mib - best.memory_mib):
            best = model
    return best.name if best is not None else nvml_name


def mig_profile_name(model_name: str, profile_id: int, nvml_profile_name: str) -> str:
    """The catalog name of a GPU-instance profile ("3g.40gb") by its NVML profile id, else the name
    NVML gives it (with a leading "MIG " removed, as NVML writes "MIG 3g.40gb")."""
    model = gpu_model(model_name)
    profile = model.mig.profile_by_id(profile_id) if model and model.mig else None
    if profile is not None:
        return profile.name
    return nvml_profile_name.removeprefix("MIG ").strip()
