"""GPU models, MIG profiles and placement geometry, MPS limits."""

from __future__ import annotations

from gpuplex.core.catalog.gpus import GPU_MODELS, MPS_CLIENT_LIMIT, MPS_THREAD_PERCENT
from gpuplex.core.catalog.lookup import Catalog, built_in_name_like, is_built_in
from gpuplex.core.catalog.model import GpuModel, MigGeometry, MigProfile, Provenance

_BY_NAME = {model.name: model for model in GPU_MODELS}


def gpu_model(name: str) -> GpuModel | None:
    """The built-in entry for a model name as written in gpuplex.yaml (exact, case-sensitive).
    A spec's own models too: `spec.fleet.catalog.model(name)`."""
    return _BY_NAME.get(name)


def gpu_model_names() -> list[str]:
    return [model.name for model in GPU_MODELS]


def gpu_model_for_nvml_name(nvml_name: str) -> GpuModel | None:
    """The catalog entry for a device name as NVML reports it ("NVIDIA H100 80GB HBM3")."""
    for model in GPU_MODELS:
        if nvml_name in model.nvml_names:
            return model
    return None


__all__ = [
    "GPU_MODELS",
    "MPS_CLIENT_LIMIT",
    "MPS_THREAD_PERCENT",
    "Catalog",
    "GpuModel",
    "MigGeometry",
    "MigProfile",
    "Provenance",
    "built_in_name_like",
    "gpu_model",
    "gpu_model_for_nvml_name",
    "gpu_model_names",
    "is_built_in",
]
