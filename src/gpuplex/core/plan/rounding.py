"""When a replica gets more than it asked: a memory request granted as a MIG profile or whole GPUs.

`gpu: {memory_gib: 40}` on an A100-80GB cannot have `3g.40gb`, whose 40448 MiB are 39.5 GiB: the
smallest profile that holds 40 GiB is `7g.80gb` (79.25 GiB). The plan records the request, the
grant and the next smaller profile, so `explain` and `plan` can say why.
"""

from __future__ import annotations

from gpuplex.core.catalog import GpuModel
from gpuplex.core.plan.demand import Sized, Unit
from gpuplex.core.plan.model import Mode, RoundedUp


def rounded_up(unit: Unit, sized: Sized, model: GpuModel) -> RoundedUp | None:
    """What `unit` asked and got on `model`, when the grant is a fixed size above the ask; None
    for an explicit profile or GPU count, and for shares (they get exactly the memory asked)."""
    if unit.memory_mib is None or unit.mode not in (Mode.MIG, Mode.DEDICATED):
        return None
    if unit.mode is Mode.DEDICATED:
        whole = "whole GPU" if unit.gpu_count == 1 else f"{unit.gpu_count} whole GPUs"
        if sized.memory_mib <= unit.memory_mib * unit.gpu_count:
            return None
        return RoundedUp(
            requested_memory_mib=unit.memory_mib,
            requested_compute_percent=unit.compute_percent,
            granted=whole,
            granted_memory_mib=sized.memory_mib,
        )
    profile, geometry = sized.profile, model.mig
    if unit.mig_profile is not None or profile is None or geometry is None:
        return None
    if profile.memory_mib <= unit.memory_mib and unit.compute_percent is None:
        return None  # granted exactly what was asked
    smaller = max(
        (
            p
            for p in geometry.profiles
            if not p.is_variant
            and (p.memory_slices, p.compute_slices)
            < (profile.memory_slices, profile.compute_slices)
        ),
        key=lambda p: (p.memory_slices, p.compute_slices),
        default=None,
    )
    return RoundedUp(
        requested_memory_mib=unit.memory_mib,
        requested_compute_percent=unit.compute_percent,
        granted=profile.name,
        granted_memory_mib=profile.memory_mib,
        smaller=smaller.name if smaller else None,
        smaller_memory_mib=smaller.memory_mib if smaller else None,
    )
