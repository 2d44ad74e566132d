"""Rules of `fleet.gpu_models`: each added card has its memory given once, a name of its own, and
never a built-in model's name (whose memory and MIG geometry the built-in catalog alone defines)."""

from __future__ import annotations

from collections.abc import Iterator

from gpuplex.core.catalog import built_in_name_like, is_built_in
from gpuplex.core.spec.fleet import FleetSpec
from gpuplex.errors import FieldPath, SpecProblem


def check_gpu_models(fleet: FleetSpec) -> Iterator[SpecProblem]:
    seen: set[str] = set()
    for i, entry in enumerate(fleet.gpu_models):
        path: FieldPath = ("fleet", "gpu_models", i)
        like = built_in_name_like(entry.name)
        if is_built_in(entry.name):
            yield SpecProblem(
                (*path, "name"),
                f"{entry.name} is a built-in model: name it in fleet.nodes[].gpus[].model as it "
                "is (its memory and MIG profiles come from the catalog), or give this card "
                "another name",
            )
        elif like is not None:
            yield SpecProblem(
                (*path, "name"),
                f"{entry.name!r} is the built-in model {like} in other letter case (did you mean "
                f'"{like}"?): name the built-in as it is, or give this card another name',
            )
        if entry.name in seen:
            yield SpecProblem((*path, "name"), f"GPU model {entry.name!r} is added twice")
        seen.add(entry.name)
        if entry.memory_gib is None and entry.memory_mib is None:
            yield SpecProblem(path, "give the card's memory: memory_gib or memory_mib")
        elif entry.memory_gib is not None and entry.memory_mib is not None:
            yield SpecProblem((*path, "memory_mib"), "give memory_gib or memory_mib, not both")
