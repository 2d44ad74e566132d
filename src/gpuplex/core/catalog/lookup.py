"""The GPU models one spec may name: the built-in catalog and the cards the spec adds.

A spec adds cards without MIG only (`fleet.gpu_models`): MIG geometry (profiles, placements) comes
from the built-in catalog alone, and an added model never redefines a built-in one. So a name
means the same card, and the same MIG geometry, in every spec that names it."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.catalog.gpus import GPU_MODELS
from gpuplex.core.catalog.model import GpuModel

_BUILT_IN = {model.name: model for model in GPU_MODELS}


@dataclass(frozen=True, slots=True)
class Catalog:
    """The built-in models, then `added` (a spec's own). An added model named like a built-in
    one, in any letter case, is never seen here (validation reports it): the built-in stands."""

    added: tuple[GpuModel, ...] = ()

    @property
    def models(self) -> tuple[GpuModel, ...]:
        return GPU_MODELS + tuple(self._own().values())

    def model(self, name: str) -> GpuModel | None:
        """The entry for a model name as written in gpuplex.yaml (exact, case-sensitive)."""
        return _BUILT_IN.get(name) or self._own().get(name)

    def names(self) -> list[str]:
        return [model.name for model in self.models]

    def _own(self) -> dict[str, GpuModel]:
        own: dict[str, GpuModel] = {}
        for model in self.added:
            if built_in_name_like(model.name) is None:
                own.setdefault(model.name, model)  # of two with one name, the first counts
        return own


def is_built_in(name: str) -> bool:
    return name in _BUILT_IN


def built_in_name_like(name: str) -> str | None:
    """The built-in model that `name` spells differently only in letter case ("l40s": L40S)."""
    lowered = name.lower()
    return next((known for known in _BUILT_IN if known.lower() == lowered), None)
