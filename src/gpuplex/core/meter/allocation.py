"""Allocation metering: what each tenant held, from the revisions of the applied plan.

A tenant pays for what it reserved, used or not. Each placement of a plan that was active for part of
the window counts `instance_seconds` (the seconds it held its place) and `gpu_seconds` (those seconds
times its share of a GPU: 1 per whole GPU, 2 for two whole GPUs, a MIG slice or MPS share its
compute_percent / 100). A time-slice share that names no compute_percent gets an equal part, in whole
percent, of what the named shares leave of that GPU (two: 50 % each; three: 33 % each, the last
1 % stays idle), so it is never free and every quantity stays exact.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from itertools import pairwise

from gpuplex.core.meter.model import (
    FLEET_GPU_SECONDS,
    FLEET_TENANT,
    GPU_SECONDS,
    INSTANCE_SECONDS,
    MeterLine,
    MeterWindow,
    lines_from_totals,
    utc_span,
)
from gpuplex.core.meter.riders import ServerKey, SharedServer, split_exactly
from gpuplex.core.plan.model import Mode, Placement, Plan
from gpuplex.errors import MeterInputError

_HUNDRED = Decimal(100)


@dataclass(frozen=True, slots=True)
class PlanInterval:
    """One revision of the applied plan and when it was in force: [active_from, active_until)."""

    plan: Plan
    active_from: datetime
    active_until: datetime | None = None  # None: still in force
    #: the model servers of this revision that other tenants' adapters ride on
    shared_servers: tuple[SharedServer, ...] = ()

    def __post_init__(self) -> None:
        start, end = utc_span(
            self.active_from, self.active_until, ("active_from", "active_until"), "plan interval"
        )
        object.__setattr__(self, "active_from", start)
        object.__setattr__(self, "active_until", end)


def allocation_dimension(gpu_model: str, mode: Mode, mig_profile: str | None = None) -> str:
    """`H100-80GB/dedicated`, `H100-80GB/mig:3g.40gb`, `H100-80GB/mps`, `H100-80GB/timeslice`."""
    if mode is Mode.MIG:
        return f"{gpu_model}/mig:{mig_profile}"
    return f"{gpu_model}/{mode.value}"


def placement_dimension(placement: Placement) -> str:
    """The allocation dimension a placement is billed under."""
    profile = placement.mig.profile if placement.mig else None
    return allocation_dimension(placement.gpu_model, placement.mode, profile)


def parse_allocation_dimension(dimension: str) -> tuple[str, Mode, str | None]:
    """The inverse of allocation_dimension: (GPU model, mode, MIG profile or None)."""
    gpu_model, _, rest = dimension.rpartition("/")
    mode_text, _, profile = rest.partition(":")
    try:
        mode = Mode(mode_text)
    except ValueError:
        raise MeterInputError(
            f"{dimension!r} is not an allocation dimension (MODEL/MODE or MODEL/mig:PROFILE)"
        ) from None
    if not gpu_model or (mode is Mode.MIG) != bool(profile):
        raise MeterInputError(
            f"{dimension!r} is not an allocation dimension (MODEL/MODE or MODEL/mig:PROFILE)"
        )
    return gpu_model, mode, profile or None


def placement_gpu_share(placement: Placement) -> Decimal:
    """The GPUs a placement holds by itself: compute_percent / 100 (1 per whole GPU). A time-slice
    share that names no compute_percent holds 0 here: its share depends on its neighbours
    (`gpu_share` with the plan)."""
    return Decimal(placement.compute_percent) / _HUNDRED


def gpu_share(placement: Placement, plan: Plan) -> Decimal:
    """The GPUs a placement holds: compute_percent / 100, with the time-slice rule above."""
    if placement.mode is not Mode.TIMESLICE or placement.compute_percent > 0:
        return placement_gpu_share(placement)
    neighbours = [
        p
        for p in plan.placements
        if p.mode is Mode.TIMESLICE
        and p.node == placement.node
        and p.gpu_indices == placement.gpu_indices
    ]
    named = sum(p.compute_percent for p in neighbours)
    unnamed = sum(1 for p in neighbours if p.compute_percent == 0)
    return Decimal(max(0, 100 - named) // unnamed) / _HUNDRED


def _check_no_overlap(intervals: Sequence[PlanInterval]) -> None:
    ordered = sorted(intervals, key=lambda i: i.active_from)
    for before, after in pairwise(ordered):
        if before.active_until is None or before.active_until > after.active_from:
            raise MeterInputError(
                f"plan revisions overlap: one in force from {before.active_from.isoformat()} "
                f"until {_until(before)}, the next from {after.active_from.isoformat()}; "
                "end each revision where the next begins"
            )


def _until(interval: PlanInterval) -> str:
    return "now" if interval.active_until is None else interval.active_until.isoformat()


def allocation_lines(
    intervals: Sequence[PlanInterval],
    window: MeterWindow,
    usage: Mapping[ServerKey, Mapping[str, Decimal]] | None = None,
) -> list[MeterLine]:
    """Per tenant and dimension: gpu_seconds and instance_seconds held inside the window. A shared
    model server in `usage` (its tenants' tokens in this window, see core.meter.riders) is charged
    to those tenants by their tokens instead of to its owner alone."""
    _check_no_overlap(intervals)
    used = usage or {}
    totals: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for interval in intervals:
        seconds = window.overlap_seconds(interval.active_from, interval.active_until)
        if seconds == 0:
            continue
        for placement in interval.plan.placements:
            dimension = placement_dimension(placement)
            share = gpu_share(placement, interval.plan)
            weights = used.get((placement.tenant, placement.workload), {})
            for metric, quantity in ((GPU_SECONDS, seconds * share), (INSTANCE_SECONDS, seconds)):
                for tenant, part in split_exactly(quantity, weights, placement.tenant).items():
                    totals[tenant, metric, dimension] += part
    return lines_from_totals(totals, "allocation")


def fleet_gpu_seconds(intervals: Sequence[PlanInterval], window: MeterWindow) -> list[MeterLine]:
    """The capacity: every GPU in each plan revision's `gpus` x the seconds it was in force, per GPU
    model, as lines of FLEET_TENANT. Idle capacity is this less what tenants are charged."""
    _check_no_overlap(intervals)
    totals: dict[tuple[str, str, str], Decimal] = defaultdict(Decimal)
    for interval in intervals:
        seconds = window.overlap_seconds(interval.active_from, interval.active_until)
        if seconds == 0:
            continue
        for gpu in interval.plan.gpus:
            totals[FLEET_TENANT, FLEET_GPU_SECONDS, gpu.model] += seconds
    return lines_from_totals(totals, "allocation")
