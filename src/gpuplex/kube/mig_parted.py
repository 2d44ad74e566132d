"""Per node, the MIG layout the plan needs, as a mig-parted config (gpu-sharing-facts.md §2).

The GPU operator's MIG manager reads the layout named by the node label `nvidia.com/mig.config` and
creates that many GPU instances of each profile on each listed GPU. mig-parted places instances
itself (it tries the profiles in every order until the driver accepts one), so a layout holds counts,
not the plan's start slots; the counts are checked here against the catalog's geometry so that a
layout the driver cannot build is never rendered.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuplex.core.catalog import MigGeometry, MigProfile, gpu_model
from gpuplex.core.plan import GpuView
from gpuplex.errors import KubeRenderError
from gpuplex.kube.nodes import NodeGpus
from gpuplex.kube.queue_slices import QueueSlices

#: The layout of a node with no GPU in MIG mode (the MIG manager's own default name).
ALL_DISABLED = "all-disabled"
ALL_DISABLED_LAYOUT: list[dict[str, Any]] = [{"devices": "all", "mig-enabled": False}]


def mig_layout(item: NodeGpus, queue_slices: QueueSlices | None = None) -> list[dict[str, Any]]:
    """mig-parted entries for the node: GPUs with the same profile counts share an entry; GPUs
    not in MIG mode are listed with `mig-enabled: false`. `devices: all` when one entry covers
    every GPU. A pinned GPU with no slice is MIG-enabled with the slices cut for the queues
    (`gpuplex.kube.queue_slices`), else with no instances, as on a host."""
    queue_slices = queue_slices or {}
    mig = {g.index for g in item.mig_gpus()}
    if not mig:
        return [dict(entry) for entry in ALL_DISABLED_LAYOUT]
    groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
    for gpu in item.gpus:
        if gpu.index in mig:
            planned = _profile_counts(item.name, gpu)
            if not gpu.occupants:
                planned = queue_slices.get((item.name, gpu.index), planned)
            key = (True, tuple(planned.items()))
        else:
            key = (False, ())
        groups.setdefault(key, []).append(gpu.index)
    entries = []
    for (enabled, counts), indices in groups.items():
        devices: str | list[int] = "all" if len(groups) == 1 else indices
        entry: dict[str, Any] = {"devices": devices, "mig-enabled": enabled}
        if enabled:
            entry["mig-devices"] = dict(counts)
        entries.append(entry)
    return entries


def mig_parted_config(layouts: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The whole mig-parted document: `all-disabled` first, then the named layouts by name."""
    configs = {ALL_DISABLED: [dict(entry) for entry in ALL_DISABLED_LAYOUT]}
    for name in sorted(layouts):
        if name != ALL_DISABLED:
            configs[name] = layouts[name]
    return {"version": "v1", "mig-configs": configs}


def _profile_counts(node: str, gpu: GpuView) -> dict[str, int]:
    """Profile -> instance count on one GPU, in the catalog's profile order, after checking that
    the GPU can hold them: known profiles of its model, each within its maximum, compute and
    memory slices within the GPU's, and the plan's placements on valid, disjoint slots."""
    where = f"node {node} GPU {gpu.index} ({gpu.model})"
    model = gpu_model(gpu.model)
    if model is None or model.mig is None:
        raise KubeRenderError(
            f"{where}: the plan puts MIG slices on a model without MIG in the catalog; "
            "make the plan again from this spec (gpuplex plan)"
        )
    geometry = model.mig
    counts: Counter[MigProfile] = Counter()
    used_slots: set[int] = set()
    for occupant in gpu.occupants:
        if occupant.mig is None:
            raise KubeRenderError(
                f"{where}: {occupant.label()} has no MIG slice on a GPU in MIG mode; make the "
                "plan again from this spec (gpuplex plan)"
            )
        profile = geometry.profile(occupant.mig.profile)
        if profile is None:
            raise KubeRenderError(
                f"{where}: {occupant.label()} is planned MIG profile {occupant.mig.profile!r}, "
                f"which {gpu.model} does not have (it has "
                f"{', '.join(p.name for p in geometry.profiles)}); make the plan again"
            )
        slots = set(range(occupant.mig.start_slot, occupant.mig.start_slot + profile.memory_slices))
        if occupant.mig.start_slot not in profile.starts or slots & used_slots:
            raise KubeRenderError(
                f"{where}: {occupant.label()}'s {profile.name} slice at memory slot "
                f"{occupant.mig.start_slot} is not a valid place beside the GPU's other slices; "
                "make the plan again"
            )
        used_slots |= slots
        counts[profile] += 1
    _check_fits(where, geometry, counts)
    return {p.name: counts[p] for p in geometry.profiles if counts[p]}


def _check_fits(where: str, geometry: MigGeometry, counts: Counter[MigProfile]) -> None:
    problems = []
    compute = memory = 0
    for profile, count in counts.items():
        if count > profile.max_count:
            problems.append(f"{count} x {profile.name}, at most {profile.max_count}")
        compute += profile.compute_slices * count
        memory += profile.memory_slices * count
    if compute > geometry.compute_slices:
        problems.append(f"{compute} compute slices of {geometry.compute_slices}")
    if memory > geometry.memory_slices:
        problems.append(f"{memory} memory slices of {geometry.memory_slices}")
    if problems:
        raise KubeRenderError(
            f"{where}: the planned MIG layout does not fit the GPU ({'; '.join(problems)}); "
            "make the plan again"
        )
