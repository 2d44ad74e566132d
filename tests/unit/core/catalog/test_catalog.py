"""The catalog matches shared/reference/gpu-sharing-facts.md section 1.2."""

from __future__ import annotations

import pytest

from gpuplex.core.catalog import GPU_MODELS, Provenance, gpu_model, gpu_model_for_nvml_name
from gpuplex.core.plan.mig_fit import layout_problems

EIGHT_SLICE = ["A100-40GB", "A100-80GB", "H100-80GB", "H100-94GB", "H200-141GB", "B200"]
# profile id -> (compute slices, memory slices, valid starts, max count), from the reference table
GEOMETRY = {
    19: (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    20: (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    15: (1, 2, (0, 2, 4, 6), 4),
    14: (2, 2, (0, 2, 4), 3),
    9: (3, 4, (0, 4), 2),
    5: (4, 4, (0,), 1),
    0: (7, 8, (0,), 1),
}


@pytest.mark.parametrize("name", EIGHT_SLICE)
def test_eight_slice_geometry(name: str) -> None:
    model = gpu_model(name)
    assert model is not None
    assert model.mig is not None
    assert (model.mig.compute_slices, model.mig.memory_slices) == (7, 8)
    got = {
        p.profile_id: (p.compute_slices, p.memory_slices, p.starts, p.max_count)
        for p in model.mig.profiles
    }
    assert got == GEOMETRY


def test_a30_geometry() -> None:
    model = gpu_model("A30")
    assert model is not None
    assert model.mig is not None
    got = {
        p.name: (p.profile_id, p.memory_slices, p.starts, p.max_count) for p in model.mig.profiles
    }
    assert got == {
        "1g.6gb": (14, 1, (0, 1, 2, 3), 4),
        "1g.6gb+me": (21, 1, (0, 1, 2, 3), 1),
        "2g.12gb": (5, 2, (0, 2), 2),
        "2g.12gb+me": (6, 2, (0, 2), 1),
        "4g.24gb": (0, 4, (0,), 1),
    }


@pytest.mark.parametrize("model", GPU_MODELS, ids=lambda m: m.name)
def test_facts_are_consistent(model: object) -> None:
    from gpuplex.core.catalog import GpuModel

    assert isinstance(model, GpuModel)
    assert model.memory_mib > 0
    assert model.sm_count > 0
    assert isinstance(model.provenance, Provenance)
    if model.mig is None:
        return
    for profile in model.mig.profiles:
        assert profile.memory_mib <= model.memory_mib
        assert max(profile.starts) + profile.memory_slices <= model.mig.memory_slices
        assert profile.name.startswith(f"{profile.compute_slices}g.")


def test_slot_seven_is_never_a_start() -> None:
    model = gpu_model("H100-80GB")
    assert model is not None
    assert model.mig is not None
    assert all(7 not in p.starts for p in model.mig.profiles)


def test_guide_worked_placements() -> None:
    """MIG User Guide: 3-2-1-1 is 19@0, 19@1, 14@2, 9@4; 4g and 3g@0 overlap."""
    model = gpu_model("A100-40GB")
    assert model is not None
    assert model.mig is not None
    p = {profile.profile_id: profile for profile in model.mig.profiles}
    assert layout_problems(model.mig, [(p[19], 0), (p[19], 1), (p[14], 2), (p[9], 4)]) == []
    assert layout_problems(model.mig, [(p[5], 0), (p[9], 0)]) == [
        "3g.20gb@0 overlaps another instance"
    ]
    assert layout_problems(model.mig, [(p[14], 6)]) == [
        "2g.10gb cannot start at slot 6 (valid: (0, 2, 4))",
    ]
    assert layout_problems(model.mig, [(p[20], 0), (p[20], 1)]) == ["more than 1 x 1g.5gb+me"]


def test_nvml_names_resolve() -> None:
    model = gpu_model_for_nvml_name("NVIDIA H100 80GB HBM3")
    assert model is not None
    assert model.name == "H100-80GB"
    assert gpu_model_for_nvml_name("NVIDIA Nonexistent") is None
