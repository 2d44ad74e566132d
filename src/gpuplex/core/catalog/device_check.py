"""Does the catalog agree with a real GPU? The facts NVML gives for each GPU-instance profile
(`nvmlDeviceGetGpuInstanceProfileInfo`: id, slices, memory, instance count) and where it may be
placed (`nvmlDeviceGetGpuInstancePossiblePlacements`), set against the catalog's entry for the
model. Pure: the driver reads the device (read-only) and hands the facts in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplex.core.catalog.model import GpuModel, MigProfile


@dataclass(frozen=True, slots=True)
class DeviceMigProfile:
    """One GPU-instance profile as NVML reports it on a device."""

    profile_id: int
    name: str  # "1g.10gb" ("MIG " dropped); "" where the NVML binding gives no name
    compute_slices: int  # sliceCount
    memory_mib: int  # memorySizeMB, which NVML counts in MiB
    max_count: int  # instanceCount
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices


def profiles_of(model: GpuModel) -> list[DeviceMigProfile]:
    """The catalog's profiles as NVML would list them (what a simulated GPU reports)."""
    return [
        DeviceMigProfile(
            profile_id=p.profile_id,
            name=p.name,
            compute_slices=p.compute_slices,
            memory_mib=p.memory_mib,
            max_count=p.max_count,
            placements=tuple((start, p.memory_slices) for start in p.starts),
        )
        for p in (model.mig.profiles if model.mig else ())
    ]


@dataclass(frozen=True, slots=True)
class Disagreement:
    profile: (
        str  # the catalog's profile name, or "id N" for one the catalog lacks; "GPU" for the card
    )
    field: str
    catalog: str
    device: str


def compare_with_device(
    model: GpuModel, device_memory_mib: int, profiles: Sequence[DeviceMigProfile]
) -> list[Disagreement]:
    """Every fact where the catalog and the device differ; [] when they agree."""
    found = []
    if device_memory_mib != model.memory_mib:
        found.append(
            Disagreement("GPU", "memory_mib", str(model.memory_mib), str(device_memory_mib))
        )
    catalog = {p.profile_id: p for p in (model.mig.profiles if model.mig else ())}
    device = {p.profile_id: p for p in profiles}
    for profile_id in sorted(catalog.keys() - device.keys()):
        found.append(Disagreement(catalog[profile_id].name, "profile", "listed", "absent"))
    for profile_id in sorted(device.keys() - catalog.keys()):
        seen = device[profile_id]
        found.append(Disagreement(f"id {profile_id}", "profile", "absent", seen.name or "listed"))
    for profile_id in sorted(catalog.keys() & device.keys()):
        found += _compare_profile(catalog[profile_id], device[profile_id])
    return found


def _compare_profile(listed: MigProfile, seen: DeviceMigProfile) -> list[Disagreement]:
    listed_placements = tuple((start, listed.memory_slices) for start in listed.starts)
    pairs = [
        ("name", listed.name, seen.name or listed.name),  # no name from NVML: nothing to compare
        ("compute_slices", str(listed.compute_slices), str(seen.compute_slices)),
        ("memory_mib", str(listed.memory_mib), str(seen.memory_mib)),
        ("max_count", str(listed.max_count), str(seen.max_count)),
        ("placements", placements_text(listed_placements), placements_text(seen.placements)),
    ]
    return [
        Disagreement(listed.name, field, want, got) for field, want, got in pairs if want != got
    ]


def placements_text(placements: Sequence[tuple[int, int]]) -> str:
    """As `nvidia-smi mig -lgipp` prints them: `{0,4}:4`; mixed sizes are listed one by one."""
    sizes = {size for _, size in placements}
    if not placements:
        return "none"
    if len(sizes) == 1:
        return (
            "{" + ",".join(str(start) for start, _ in sorted(placements)) + "}:" + str(sizes.pop())
        )
    return " ".join(f"{start}:{size}" for start, size in sorted(placements))


@dataclass(frozen=True, slots=True)
class CatalogVerdict:
    summary: str
    disagreements: list[Disagreement]
    profiles_compared: bool  # False where NVML listed no profile to compare (MIG mode off)


def catalog_verdict(
    reported_model: str,
    model: GpuModel | None,
    device_memory_mib: int,
    mig_enabled: bool,
    profiles: Sequence[DeviceMigProfile],
) -> CatalogVerdict:
    """The answer for one GPU: `model` is the catalog entry for `reported_model` (None: none)."""
    if model is None:
        missing = Disagreement("GPU", "model", "absent", reported_model)
        return CatalogVerdict(
            f"{reported_model!r} is not in the catalog: add it (core/catalog/gpus.py)",
            [missing],
            False,
        )
    if model.mig is not None and not profiles and not mig_enabled:
        found = compare_with_device(model, device_memory_mib, profiles)
        found = [d for d in found if d.field != "profile"]
        return CatalogVerdict(
            "NVML lists no MIG profile while MIG mode is off, so only the memory was compared "
            "(switching MIG mode is the operator's call: gpuplex host mig-mode)",
            found,
            False,
        )
    found = compare_with_device(model, device_memory_mib, profiles)
    count = len(model.mig.profiles) if model.mig else 0
    if found:
        return CatalogVerdict(f"the catalog disagrees on {len(found)} facts", found, True)
    what = f"{count} MIG profiles, their placements and the memory" if count else "the memory"
    return CatalogVerdict(f"the catalog agrees: {what}", [], True)
