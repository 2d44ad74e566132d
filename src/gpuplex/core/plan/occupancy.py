"""What is on one GPU, and the one rule for whether a replica may join it.

`fit_on` is the single source of truth for "does this replica fit this GPU": the fast index, the
diagnostics for infeasible replicas and preemption all ask it (through `FleetIndex.fit`, which adds
a Kubernetes target's one sharing method per node, node_sharing.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cache

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, MPS_THREAD_PERCENT, MigGeometry, MigProfile
from gpuplex.core.plan.demand import Key, Sized, Unit
from gpuplex.core.plan.inventory import GpuSlot
from gpuplex.core.plan.mig_fit import free_starts, room_left, slot_mask
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import Requirement, TenantSpec


@dataclass(slots=True)
class Hold:
    unit: Unit
    sized: Sized  # per GPU for dedicated multi-GPU replicas: the whole demand; see memory_on_gpu
    mig_start: int | None
    gpu_ids: tuple[int, ...]

    @property
    def memory_per_gpu_mib(self) -> int:
        """A multi-GPU dedicated replica's memory is spread over its GPUs."""
        return self.sized.memory_mib // len(self.gpu_ids)


@dataclass(slots=True)
class GpuState:
    slot: GpuSlot
    mode: Mode | None = None
    mig_mask: int = 0
    mig_compute: int = 0
    mig_special: tuple[str, ...] = ()  # single-instance profiles present (+me, 4g, 7g)
    memory_used_mib: int = 0
    threads_used: int = 0
    clients: int = 0
    tenants: Counter[str] = field(default_factory=Counter)
    holds: dict[Key, Hold] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.holds

    @property
    def free_memory_mib(self) -> int:
        return self.slot.model.memory_mib - self.memory_used_mib

    @property
    def mig_signature(self) -> MigSignature:
        return (self.mig_mask, self.mig_compute, self.mig_special)

    def add(self, hold: Hold) -> None:
        unit, sized = hold.unit, hold.sized
        self.mode = unit.mode
        self.holds[unit.key] = hold
        self.tenants[unit.tenant.name] += 1
        self.clients += 1
        self.memory_used_mib += hold.memory_per_gpu_mib
        self.threads_used += sized.thread_percent or 0
        if sized.profile is not None and hold.mig_start is not None:
            self.mig_mask |= slot_mask(sized.profile, hold.mig_start)
            self.mig_compute += sized.profile.compute_slices
            if sized.profile.single_instance:
                self.mig_special = tuple(sorted((*self.mig_special, sized.profile.name)))

    def remove(self, key: Key) -> Hold:
        hold = self.holds.pop(key)
        unit, sized = hold.unit, hold.sized
        self.tenants[unit.tenant.name] -= 1
        if not self.tenants[unit.tenant.name]:
            del self.tenants[unit.tenant.name]
        self.clients -= 1
        self.memory_used_mib -= hold.memory_per_gpu_mib
        self.threads_used -= sized.thread_percent or 0
        if sized.profile is not None and hold.mig_start is not None:
            self.mig_mask &= ~slot_mask(sized.profile, hold.mig_start)
            self.mig_compute -= sized.profile.compute_slices
            self.mig_special = tuple(n for n in self.mig_special if n != sized.profile.name)
        if not self.holds:
            self.mode = None
        return hold


def mode_problem(unit: Unit, slot: GpuSlot) -> str | None:
    """Whether the GPU can ever run the unit's mode (independent of what is on it)."""
    if unit.mode is Mode.MIG and not slot.runs_mig:
        return (
            f"{slot.model.name} has no MIG" if slot.model.mig is None else "MIG is off on this GPU"
        )
    if unit.mode is not Mode.MIG and not slot.runs_whole:
        return f"GPU is in MIG mode; {unit.mode} needs a non-MIG GPU"
    return None


def sharing_problem(unit: Unit, state: GpuState, tenants: dict[str, TenantSpec]) -> str | None:
    """Co-tenancy: may this unit's tenant share this physical GPU with those already on it?"""
    me = unit.tenant
    others = sorted(name for name in state.tenants if name != me.name)  # stable messages
    if not others:
        return None
    if me.exclusive_gpus:
        return f"{me.name} never shares a GPU (exclusive_gpus); {others[0]} is on it"
    hard_alone = state.mode is not Mode.MIG and me.effective_requirement is Requirement.HARD
    for name in others:
        other = tenants[name]
        if other.exclusive_gpus:
            return f"held by {name}, which never shares a GPU"
        if name in me.never_share_with or me.name in other.never_share_with:
            return f"{me.name} and {name} must never share a GPU"
        if hard_alone or (
            state.mode is not Mode.MIG and other.effective_requirement is Requirement.HARD
        ):
            return "hard isolation never shares a non-MIG GPU"
    return None


def open_mig_starts(state: GpuState, profile: MigProfile) -> tuple[int, ...]:
    """Where `profile` may start on this GPU now: free slots, compute and per-GPU count allowing."""
    geometry = state.slot.model.mig
    if geometry is None:
        return ()
    return _open_starts(geometry, profile, state.mig_mask, state.mig_compute, state.mig_special)


def best_mig_start(state: GpuState, sized: Sized) -> int | None:
    """The open start that leaves the most room, or None when the profile does not fit."""
    profile, geometry = sized.profile, state.slot.model.mig
    if profile is None or geometry is None:
        return None
    return _best_start(geometry, profile, state.mig_mask, state.mig_compute, state.mig_special)


@cache
def _open_starts(
    geometry: MigGeometry, profile: MigProfile, mask: int, compute: int, special: tuple[str, ...]
) -> tuple[int, ...]:
    count = 1 if profile.name in special else 0
    return tuple(free_starts(geometry, profile, mask=mask, compute_used=compute, count=count))


@cache
def _best_start(
    geometry: MigGeometry, profile: MigProfile, mask: int, compute: int, special: tuple[str, ...]
) -> int | None:
    starts = _open_starts(geometry, profile, mask, compute, special)
    if not starts:
        return None
    return max(starts, key=lambda s: (room_left(geometry, mask | slot_mask(profile, s)), -s))


MigSignature = tuple[int, int, tuple[str, ...]]  # GpuState.mig_signature


@dataclass(frozen=True, slots=True)
class MigChoice:
    """Where a profile goes on a GPU (`best_mig_start`), and what that leaves of the GPU."""

    start: int
    free_after: int  # memory slots left free
    room_after: int  # mig_fit.room_left of the layout after


class MigChoices:
    """`MigChoice`s on GPUs of one MIG geometry, by profile and the GPU's MIG signature: a plan
    asks the same few hundred questions many thousand times. Lives as long as the index it
    serves, one planning run."""

    def __init__(self, geometry: MigGeometry) -> None:
        self.geometry = geometry
        self._known: dict[tuple[str, MigSignature], MigChoice | None] = {}

    def on(self, profile: MigProfile, signature: MigSignature) -> MigChoice | None:
        """The choice on a GPU with this signature, or None when the profile does not fit."""
        key = (profile.name, signature)
        if key in self._known:
            return self._known[key]
        geometry, (mask, compute, special) = self.geometry, signature
        start = _best_start(geometry, profile, mask, compute, special)
        choice = None
        if start is not None:
            after = mask | slot_mask(profile, start)
            free_after = geometry.memory_slices - after.bit_count()
            choice = MigChoice(start, free_after, room_left(geometry, after))
        self._known[key] = choice
        return choice


def fit_on(unit: Unit, sized: Sized, state: GpuState, tenants: dict[str, TenantSpec]) -> int | str:
    """Single-GPU fit: the MIG start (or -1 for other modes) when it fits, else the reason it does not."""
    slot = state.slot
    problem = mode_problem(unit, slot)
    if problem:
        return problem
    if state.mode is not None and state.mode is not unit.mode:
        return f"GPU already runs {state.mode}"
    if unit.mode is Mode.DEDICATED:
        return -1 if state.is_empty else "GPU is not free"
    fit = -1
    if unit.mode is Mode.MIG:
        start = best_mig_start(state, sized)
        if start is None:
            return f"no free MIG placement for {sized.profile_name}"
        fit = start
    elif sized.memory_mib > state.free_memory_mib:
        return "not enough free memory"
    elif (
        unit.mode is Mode.MPS
        and state.threads_used + (sized.thread_percent or 0) > MPS_THREAD_PERCENT
    ):
        return "not enough free MPS threads"
    elif unit.mode is Mode.MPS and state.clients >= MPS_CLIENT_LIMIT:
        return f"MPS client limit ({MPS_CLIENT_LIMIT}) reached"
    return sharing_problem(unit, state, tenants) or fit
