"""The facts: GPU models and MIG profiles, from shared/reference/gpu-sharing-facts.md (sections 1.2-1.5).

Every 8-memory-slice GPU (A100, H100, H200, B200) shares one placement geometry; only the profile names
and memory sizes differ. Memory sizes are what `nvidia-smi mig -lgip` printed in public listings where one
was found (PUBLIC_LISTING), otherwise the documented memory fraction of the full-GPU profile (INFERRED).
Whole-GPU memory is the nominal size in MiB unless noted. Read profiles from NVML at run time where a
GPU is present; this table is for planning offline.
"""

from __future__ import annotations

from gpuplex.core.catalog.model import GpuModel, MigGeometry, MigProfile, Provenance

# (profile id, compute slices, memory slices, valid starts, max count) of the 8-slice geometry.
# Source: MIG User Guide `nvidia-smi mig -lgipp` on A100-40GB; identical real listings on H100.
_EIGHT_SLICE = {
    19: (1, 1, (0, 1, 2, 3, 4, 5, 6), 7),
    20: (1, 1, (0, 1, 2, 3, 4, 5, 6), 1),  # +me: media extensions, one per GPU
    15: (1, 2, (0, 2, 4, 6), 4),
    14: (2, 2, (0, 2, 4), 3),
    9: (3, 4, (0, 4), 2),
    5: (4, 4, (0,), 1),
    0: (7, 8, (0,), 1),
}

# A30: 4 memory slices, 4 compute slices. Source: two public `-lgipp` listings.
_FOUR_SLICE = {
    14: (1, 1, (0, 1, 2, 3), 4),
    21: (1, 1, (0, 1, 2, 3), 1),
    5: (2, 2, (0, 2), 2),
    6: (2, 2, (0, 2), 1),
    0: (4, 4, (0,), 1),
}

_P = Provenance.PUBLIC_LISTING
_I = Provenance.INFERRED


def _geometry(
    table: dict[int, tuple[int, int, tuple[int, ...], int]],
    compute_slices: int,
    memory_slices: int,
    profiles: list[tuple[int, str, int, Provenance]],
) -> MigGeometry:
    built = []
    for profile_id, name, memory_mib, provenance in profiles:
        compute, memory, starts, max_count = table[profile_id]
        built.append(
            MigProfile(
                name=name,
                profile_id=profile_id,
                compute_slices=compute,
                memory_slices=memory,
                memory_mib=memory_mib,
                max_count=max_count,
                starts=starts,
                provenance=provenance,
            )
        )
    return MigGeometry(compute_slices, memory_slices, tuple(built))


def _eight(profiles: list[tuple[int, str, int, Provenance]]) -> MigGeometry:
    return _geometry(_EIGHT_SLICE, 7, 8, profiles)


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        "A100-40GB",
        40960,
        108,
        _eight(
            [
                (19, "1g.5gb", 4864, _P),
                (20, "1g.5gb+me", 4864, _P),
                (15, "1g.10gb", 9856, _P),
                (14, "2g.10gb", 9984, _P),
                (9, "3g.20gb", 20096, _P),
                (5, "4g.20gb", 20096, _P),
                (0, "7g.40gb", 40448, _P),
            ]
        ),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
        Provenance.DOCUMENTED,
    ),
    GpuModel(
        "A100-80GB",
        81920,
        108,
        _eight(
            [
                (19, "1g.10gb", 9728, _I),
                (20, "1g.10gb+me", 9728, _I),
                (15, "1g.20gb", 19968, _I),
                (14, "2g.20gb", 19968, _P),
                (9, "3g.40gb", 40448, _P),
                (5, "4g.40gb", 40448, _P),
                (0, "7g.80gb", 81152, _P),
            ]
        ),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe"),
        Provenance.PUBLIC_LISTING,
    ),
    GpuModel(
        "A30",
        24576,
        56,
        _geometry(
            _FOUR_SLICE,
            4,
            4,
            [
                (14, "1g.6gb", 5888, _I),
                (21, "1g.6gb+me", 5888, _I),
                (5, "2g.12gb", 11904, _I),
                (6, "2g.12gb+me", 11904, _I),
                (0, "4g.24gb", 23808, _I),
            ],
        ),
        ("NVIDIA A30",),
        Provenance.PUBLIC_LISTING,
    ),
    GpuModel(
        "H100-80GB",
        81559,
        132,
        _eight(
            [
                (19, "1g.10gb", 9984, _P),
                (20, "1g.10gb+me", 9984, _P),
                (15, "1g.20gb", 20096, _P),
                (14, "2g.20gb", 20096, _P),
                (9, "3g.40gb", 40320, _P),
                (5, "4g.40gb", 40320, _P),
                (0, "7g.80gb", 81152, _P),
            ]
        ),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe"),
        Provenance.PUBLIC_LISTING,
    ),
    GpuModel(
        "H100-94GB",
        95830,
        132,
        _eight(
            [
                (19, "1g.12gb", 11920, _I),
                (20, "1g.12gb+me", 11920, _I),
                (15, "1g.24gb", 23840, _I),
                (14, "2g.24gb", 23840, _I),
                (9, "3g.47gb", 47488, _P),
                (5, "4g.47gb", 47488, _P),
                (0, "7g.94gb", 95360, _P),
            ]
        ),
        ("NVIDIA H100 NVL",),
        Provenance.PUBLIC_LISTING,
    ),
    GpuModel(
        "H200-141GB",
        143771,
        132,
        _eight(
            [
                (19, "1g.18gb", 16384, _P),
                (20, "1g.18gb+me", 16384, _P),
                (15, "1g.35gb", 33280, _I),
                (14, "2g.35gb", 33280, _P),
                (9, "3g.71gb", 71680, _I),
                (5, "4g.71gb", 71680, _I),
                (0, "7g.141gb", 143360, _P),
            ]
        ),
        ("NVIDIA H200", "NVIDIA H200 NVL"),
        Provenance.INFERRED,
    ),
    GpuModel(
        "B200",
        184320,
        148,
        _eight(
            [
                (19, "1g.23gb", 23040, _I),
                (20, "1g.23gb+me", 23040, _I),
                (15, "1g.45gb", 46080, _I),
                (14, "2g.45gb", 46080, _I),
                (9, "3g.90gb", 92160, _I),
                (5, "4g.90gb", 92160, _I),
                (0, "7g.180gb", 184320, _I),
            ]
        ),
        ("NVIDIA B200",),
        Provenance.INFERRED,
    ),
    # Cards without MIG: whole GPU, MPS or time-slicing only. Nominal memory, inferred.
    GpuModel("L4", 23034, 58, None, ("NVIDIA L4",), _I),
    GpuModel("L40S", 46068, 142, None, ("NVIDIA L40S",), _I),
    GpuModel("A10", 23028, 72, None, ("NVIDIA A10",), _I),
    GpuModel("T4", 15360, 40, None, ("Tesla T4",), _I),
    GpuModel("V100-32GB", 32768, 80, None, ("Tesla V100-SXM2-32GB",), _I),
    GpuModel("RTX-3050", 8192, 20, None, ("NVIDIA GeForce RTX 3050",), _I),
    GpuModel("RTX-4090", 24564, 128, None, ("NVIDIA GeForce RTX 4090",), _I),
    GpuModel("RTX-5090", 32607, 170, None, ("NVIDIA GeForce RTX 5090",), _I),
)

#: Volta+ MPS: 48 client CUDA contexts per device up to CUDA 13.0 (60 from 13.1). We plan with 48.
MPS_CLIENT_LIMIT = 48

#: MPS active-thread percentages (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) a GPU's clients may hold in all.
MPS_THREAD_PERCENT = 100
