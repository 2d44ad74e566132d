"""Fractional shares placed by the cluster policy `fgd-balanced` (see `core.trace.balanced`). Pure.

Under `policy.placement: fragmentation` the live planner scores MPS and time-slice shares the way
`fgd-balanced` scores pods, reading each GPU as a node with one GPU slot:

- GPU milli is GPU memory as a fraction of the model's: a share asks
  ceil(memory_mib * 1000 / model memory) milli, a GPU offers its free memory rounded down, so the
  scores never see room the GPU does not have;
- CPU is the MPS compute left, in percent: a GPU offers 100 - the threads its clients hold, a
  share asks its thread percentage. Time-slicing has no compute partition: its shares ask none;
- the typical pods are the plan's own share units, every replica of the mode that a GPU of the
  group (model and pool) can take, with frequencies by count. FGD estimates the coming workload
  from a sample and keeps the most popular 95 % of shapes; the planner knows its workload
  exactly, so every shape counts. The workload is taken once per planning run, every replica
  of the spec, placed yet or not.

A share goes where the GPU's fragmentation F against that workload grows least, scored
100 * sigmoid(decrease / 1000) in whole points (`fragmentation.scores.fgd_points`), ties to the
least growth of GPU milli stranded by compute (`fragmentation.scores.balance_keys`, rho: the
workload's thread percent per milli). The MPS client limit is not modelled here: `fit_on` enforces
it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.core.catalog import MPS_THREAD_PERCENT, GpuModel
from gpuplex.core.fragmentation.measure import FragmentationModel, typical_pods
from gpuplex.core.fragmentation.model import MILLI, IntArray, TracePod
from gpuplex.core.fragmentation.scores import (
    balance_keys,
    cpu_per_gpu_milli,
    fgd_points,
    stranded_gpu_milli,
)
from gpuplex.core.plan.demand import Sized, Unit, size_on
from gpuplex.core.plan.inventory import GpuSlot
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec.pools import pool_accepts

SHARE_MODES = (Mode.MPS, Mode.TIMESLICE)

#: the compute every GPU offers, in percent (all of it when nothing holds threads)
FULL_COMPUTE_PERCENT = MPS_THREAD_PERCENT

Group = tuple[str, str | None]  # GpuSlot.group: model name and pool


@dataclass(frozen=True, slots=True)
class ShareSpot:
    """What the score needs of a GPU a share could join (or open): its free memory and threads."""

    free_memory_mib: int
    threads_used: int


@dataclass(frozen=True, slots=True)
class ShareScore:
    key: int  # `balance_keys`: higher is better
    fgd_score: int  # FGD's whole points, 50 when F does not change


def share_milli(memory_mib: int, model: GpuModel) -> int:
    """A share's memory as milli of the GPU, rounded up (at least 1, so it counts as a GPU ask)."""
    return max(1, math.ceil(memory_mib * MILLI / model.memory_mib))


def free_milli(free_memory_mib: int, model: GpuModel) -> int:
    """A GPU's free memory as milli of the GPU, rounded down."""
    return free_memory_mib * MILLI // model.memory_mib


def compute_asked(mode: Mode, sized: Sized) -> int:
    return (sized.thread_percent or 0) if mode is Mode.MPS else 0


@dataclass(frozen=True, slots=True)
class _Workload:
    model: GpuModel
    fragmentation: FragmentationModel
    rho: float | None  # thread percent per milli; None when the shares ask no compute


class ShareFragmentation:
    """The scorer of one planning run: the typical shares of each GPU group and share mode."""

    def __init__(self, units: Sequence[Unit], slots: Sequence[GpuSlot]) -> None:
        self._workloads: dict[tuple[Group, Mode], _Workload] = {}
        groups = {slot.group: slot for slot in slots}
        for group, slot in groups.items():
            for mode in SHARE_MODES:
                pods = _shares_on(units, slot, mode)
                rho = cpu_per_gpu_milli(pods)
                self._workloads[group, mode] = _Workload(
                    slot.model,
                    FragmentationModel.build(
                        typical_pods(pods, popularity=1.0), (slot.model.name,)
                    ),
                    rho if rho else None,
                )

    def scores(
        self, group: Group, mode: Mode, sized: Sized, spots: Sequence[ShareSpot]
    ) -> list[ShareScore]:
        """Per spot, the score of placing a share of `sized` there (the spots must fit it)."""
        workload = self._workloads[group, mode]
        model = workload.model
        compute_before = np.array([_compute_left(mode, spot) for spot in spots], dtype=np.int64)
        compute_after = compute_before - compute_asked(mode, sized)
        milli_before = _free_milli_column([spot.free_memory_mib for spot in spots], model)
        milli_after = _free_milli_column(
            [spot.free_memory_mib - sized.memory_mib for spot in spots], model
        )
        one_model: IntArray = np.zeros(len(spots), dtype=np.int64)
        frag = workload.fragmentation
        f_before = frag.units(compute_before, milli_before, one_model)
        f_after = frag.units(compute_after, milli_after, one_model)
        primary = fgd_points(f_before - f_after, frag.thresholds)
        growth = np.zeros(len(spots), dtype=np.float64)
        if workload.rho is not None:
            before = stranded_gpu_milli(compute_before, milli_before[:, 0], workload.rho)
            after = stranded_gpu_milli(compute_after, milli_after[:, 0], workload.rho)
            growth = after - before
        keys = balance_keys(primary, growth)
        return [ShareScore(int(k), int(p)) for k, p in zip(keys, primary, strict=True)]


def _free_milli_column(free_memory_mib: list[int], model: GpuModel) -> IntArray:
    """Free milli per GPU as the (spots, 1 GPU slot) array `FragmentationModel` reads."""
    column: IntArray = np.array(
        [[free_milli(free, model)] for free in free_memory_mib], dtype=np.int64
    ).reshape(len(free_memory_mib), 1)
    return column


def _shares_on(units: Sequence[Unit], slot: GpuSlot, mode: Mode) -> list[TracePod]:
    """The units of `mode` that a GPU like `slot` can take, each as a pod of one GPU."""
    pods = []
    for unit in units:
        if unit.mode is not mode or not pool_accepts(slot.pool, unit.pool):
            continue
        sized = size_on(unit, slot.model)
        if sized is not None:
            pods.append(_as_trace_pod(unit, sized, slot.model))
    return pods


def _compute_left(mode: Mode, spot: ShareSpot) -> int:
    if mode is Mode.MPS:
        return FULL_COMPUTE_PERCENT - spot.threads_used
    return FULL_COMPUTE_PERCENT


def _as_trace_pod(unit: Unit, sized: Sized, model: GpuModel) -> TracePod:
    """A share as a pod of one GPU: its memory as GPU milli, its compute as CPU."""
    return TracePod(
        name=unit.label,
        cpu_milli=compute_asked(unit.mode, sized),
        memory_mib=0,
        num_gpu=1,
        gpu_milli=share_milli(sized.memory_mib, model),
    )
