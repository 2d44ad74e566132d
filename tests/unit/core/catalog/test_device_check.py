"""The catalog against what NVML reports for a GPU: agreement, and each kind of disagreement
named with the catalog's value and the device's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuplex.core.catalog import gpu_model
from gpuplex.core.catalog.device_check import (
    DeviceMigProfile,
    Disagreement,
    catalog_verdict,
    compare_with_device,
    placements_text,
    profiles_of,
)
from gpuplex.core.catalog.model import GpuModel

H100 = gpu_model("H100-80GB")
L4 = gpu_model("L4")


def _h100() -> GpuModel:
    assert H100 is not None
    return H100


def as_nvml_lists(model: GpuModel) -> list[DeviceMigProfile]:
    return profiles_of(model)


def _changed(profile_id: int, **fields: object) -> list[DeviceMigProfile]:
    return [
        replace(p, **fields) if p.profile_id == profile_id else p  # type: ignore[arg-type]
        for p in as_nvml_lists(_h100())
    ]


def test_a_device_that_reports_the_catalog_agrees() -> None:
    model = _h100()
    assert compare_with_device(model, model.memory_mib, as_nvml_lists(model)) == []
    verdict = catalog_verdict("H100-80GB", model, model.memory_mib, True, as_nvml_lists(model))
    assert verdict.summary == "the catalog agrees: 7 MIG profiles, their placements and the memory"
    assert verdict.profiles_compared


@pytest.mark.parametrize(
    ("profiles", "memory_mib", "expected"),
    [
        (_changed(9, memory_mib=40192), 81559, [Disagreement("3g.40gb", "memory_mib", "40320", "40192")]),
        (
            _changed(15, placements=((0, 2), (2, 2), (4, 2))),
            81559,
            [Disagreement("1g.20gb", "placements", "{0,2,4,6}:2", "{0,2,4}:2")],
        ),
        (_changed(14, max_count=2), 81559, [Disagreement("2g.20gb", "max_count", "3", "2")]),
        (_changed(5, compute_slices=3), 81559, [Disagreement("4g.40gb", "compute_slices", "4", "3")]),
        (_changed(19, name="1g.12gb"), 81559, [Disagreement("1g.10gb", "name", "1g.10gb", "1g.12gb")]),
        (_changed(19, name=""), 81559, []),  # no name from the binding: nothing to compare
        (as_nvml_lists(_h100()), 81000, [Disagreement("GPU", "memory_mib", "81559", "81000")]),
        (
            [p for p in as_nvml_lists(_h100()) if p.profile_id != 20],
            81559,
            [Disagreement("1g.10gb+me", "profile", "listed", "absent")],
        ),
        (
            [*as_nvml_lists(_h100()), DeviceMigProfile(47, "1g.10gb+gfx", 1, 9984, 7, ((0, 1),))],
            81559,
            [Disagreement("id 47", "profile", "absent", "1g.10gb+gfx")],
        ),
    ],
    ids=[
        "memory", "placements", "max-count", "slices", "name", "no-name", "gpu-memory",
        "missing-profile", "extra-profile",
    ],
)  # fmt: skip
def test_each_disagreement_names_the_fact_and_both_values(
    profiles: list[DeviceMigProfile], memory_mib: int, expected: list[Disagreement]
) -> None:
    assert compare_with_device(_h100(), memory_mib, profiles) == expected


def test_a_model_the_catalog_lacks_is_a_disagreement() -> None:
    verdict = catalog_verdict("NVIDIA Future GPU", None, 1000, False, [])
    assert verdict.disagreements == [Disagreement("GPU", "model", "absent", "NVIDIA Future GPU")]
    assert "not in the catalog" in verdict.summary


def test_with_mig_mode_off_and_no_profiles_listed_only_the_memory_is_compared() -> None:
    model = _h100()
    verdict = catalog_verdict("H100-80GB", model, model.memory_mib, False, [])
    assert verdict.disagreements == []
    assert not verdict.profiles_compared
    assert "MIG mode is off" in verdict.summary


def test_a_gpu_without_mig_compares_its_memory() -> None:
    assert L4 is not None
    assert catalog_verdict("L4", L4, L4.memory_mib, False, []).summary == (
        "the catalog agrees: the memory"
    )


@pytest.mark.parametrize(
    ("placements", "text"),
    [
        (((0, 4), (4, 4)), "{0,4}:4"),
        (((4, 4), (0, 4)), "{0,4}:4"),
        ((), "none"),
        (((0, 2), (4, 4)), "0:2 4:4"),
    ],
)
def test_placements_are_written_as_nvidia_smi_does(
    placements: tuple[tuple[int, int], ...], text: str
) -> None:
    assert placements_text(placements) == text
