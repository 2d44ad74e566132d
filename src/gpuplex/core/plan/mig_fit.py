"""MIG geometry on one GPU as bitmasks: which starts are free, and which choice keeps the most room.

A layout is the set of (profile, start) placed on a GPU. Memory slot i is bit i of the mask. A profile
fits at `start` when `start` is one of its valid starts, its slots are free, the compute slices stay
within the GPU's (7, or 4 on A30) and its per-GPU maximum count is not reached.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from gpuplex.core.catalog import MigGeometry, MigProfile


def slot_mask(profile: MigProfile, start: int) -> int:
    return ((1 << profile.memory_slices) - 1) << start


def free_starts(
    geometry: MigGeometry, profile: MigProfile, *, mask: int, compute_used: int, count: int
) -> list[int]:
    """Starts where `profile` fits given the occupied `mask`, compute used and its current count."""
    if count >= profile.max_count:
        return []
    if compute_used + profile.compute_slices > geometry.compute_slices:
        return []
    return [s for s in profile.starts if not mask & slot_mask(profile, s)]


@cache
def room_left(geometry: MigGeometry, mask: int) -> int:
    """How much room a mask leaves: valid free starts of every base profile, weighted by size.

    A choice that keeps more (and larger) placements open fragments the GPU less; the placer prefers
    it. `+me` profiles are left out: they are single-instance variants of 1g.
    """
    total = 0
    for profile in geometry.profiles:
        if profile.is_variant:
            continue
        for start in profile.starts:
            if not mask & slot_mask(profile, start):
                total += profile.memory_slices * profile.memory_slices
    return total


def layout_problems(geometry: MigGeometry, layout: Iterable[tuple[MigProfile, int]]) -> list[str]:
    """Why a set of placements is impossible on this geometry; [] when it is valid."""
    problems: list[str] = []
    mask = 0
    compute = 0
    counts: dict[str, int] = {}
    for profile, start in layout:
        if start not in profile.starts:
            problems.append(
                f"{profile.name} cannot start at slot {start} (valid: {profile.starts})"
            )
        bits = slot_mask(profile, start)
        if mask & bits:
            problems.append(f"{profile.name}@{start} overlaps another instance")
        if start + profile.memory_slices > geometry.memory_slices:
            problems.append(f"{profile.name}@{start} runs past the last memory slot")
        mask |= bits
        compute += profile.compute_slices
        counts[profile.name] = counts.get(profile.name, 0) + 1
        if counts[profile.name] > profile.max_count:
            problems.append(f"more than {profile.max_count} x {profile.name}")
    if compute > geometry.compute_slices:
        problems.append(f"{compute} compute slices used of {geometry.compute_slices}")
    return problems
