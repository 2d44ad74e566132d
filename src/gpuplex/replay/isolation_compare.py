"""The same trace under four isolation modes: what each fractional pod really takes of a GPU.

A cluster trace asks for fractions of GPUs (`gpu_milli` < 1000). How a cluster hands those out
decides what it needs. Each fractional pod becomes what the mode reserves; whole-GPU pods stay:

- `dedicated`: a whole GPU.
- `mig`: the smallest MIG profile of an A100-40GB (7 compute slices, 8 memory slices; the same
  placement geometry as A100-80GB, H100, H200) that holds the share on compute *and* on memory
  (a pod's memory need is its share of the GPU's memory): 1g.5gb up to 125 milli, 1g.10gb up to
  142, 2g.10gb 250, 3g.20gb 428, 4g.20gb 500, a 7g (the whole GPU) above. Instances are placed by
  MIG's placement rules exactly (valid starts, no overlap, at most 7 compute slices, each
  profile's maximum count), at the start that keeps the most room (`mig_fit.room_left`). None
  of the openb models (P100, T4, V100, G2, G3, A10) has MIG: this is "if they could be
  partitioned like an A100".
- `mps`: the share rounded up to a whole percent (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), with the
  pinned memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) set to the same share; at most
  `MPS_CLIENT_LIMIT` (48) clients per GPU.
- `time-slice`: the device plugin's time-slicing advertises R equal replicas per GPU; a pod takes
  whole replicas of one GPU, its share rounded up to k/R. Replicas are scheduling tokens: nothing
  partitions memory (or isolates faults), so a replica reserves no memory; a pod that takes all
  R replicas holds the whole GPU.

Reserved memory beyond a pod's need is *stranded*: nobody else can use it. Stranded memory is in
milli-GPUs of memory (1000: one GPU's memory), since the trace's models G2/G3 are anonymised.

The replay is `replay`'s: the same arrival order and node tie-break permutation for a seed
(`replay.start_replay`), the same policies. A policy chooses the node; a MIG instance keeps the
policy's GPU when MIG admits it there, else takes the admitting GPU with least room on that node. Pods never leave; a pod that fits nowhere
fails. Results are taken when the arrived GPU request (as asked) reaches 100 % of capacity (the
state after the last pod that keeps it at most 100 %) and at the end of the replay.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cache
from typing import Protocol

import numpy as np

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, MigGeometry, MigProfile, gpu_model
from gpuplex.core.fragmentation.model import BoolArray, IntArray
from gpuplex.core.plan.mig_fit import free_starts, room_left, slot_mask
from gpuplex.core.trace import (
    MILLI,
    ClusterState,
    TraceNode,
    TracePod,
    choose,
    policy_named,
)
from gpuplex.replay.placement import ProgressCallback, start_replay


class IsolationMode(StrEnum):
    DEDICATED = "dedicated"
    MIG = "mig"
    MPS = "mps"
    TIME_SLICE = "time-slice"


#: the modes, in the order reports show them (dedicated first: the baseline)
MODES: tuple[IsolationMode, ...] = tuple(IsolationMode)
#: the catalog GPU whose MIG geometry the comparison partitions every GPU by
MIG_MODEL = "A100-40GB"
DEFAULT_TIME_SLICE_REPLICAS = 4
#: one percent of a GPU: the step of CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
MPS_STEP_MILLI = MILLI // 100


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a fractional pod of a given share takes of its GPU in one mode."""

    state_milli: int  # taken from the GPU's room in the replay (MILLI: the whole GPU)
    compute_milli: float  # compute reserved (MIG: sevenths, time-slice: k/R, exactly)
    memory_milli: float  # memory reserved (1000: all of one GPU's memory)
    unit: int  # what the mode counts per GPU: MIG profile index, replicas, 1 MPS client
    label: str  # "3g.20gb", "2/4 replicas", "33 %", "whole GPU"

    @property
    def whole(self) -> bool:
        return self.state_milli >= MILLI


class SharingRules(Protocol):
    """A mode's reservation of a share, and its per-GPU limit beyond room (MIG layout, clients)."""

    def reserve(self, gpu_milli: int) -> Reservation: ...

    def admits(self, unit: int) -> BoolArray: ...  # per (node, GPU slot)

    def take(self, node: int, gpu: int, unit: int) -> None: ...


_WHOLE = Reservation(MILLI, MILLI, MILLI, 0, "whole GPU")


class DedicatedRules:
    def __init__(self, shape: tuple[int, int]) -> None:
        self._all: BoolArray = np.ones(shape, dtype=np.bool_)

    def reserve(self, gpu_milli: int) -> Reservation:
        return _WHOLE

    def admits(self, unit: int) -> BoolArray:
        return self._all

    def take(self, node: int, gpu: int, unit: int) -> None:
        return None


class MpsRules:
    """Whole percents of compute and memory; at most `MPS_CLIENT_LIMIT` clients a GPU."""

    def __init__(self, shape: tuple[int, int], client_limit: int = MPS_CLIENT_LIMIT) -> None:
        self.clients: IntArray = np.zeros(shape, dtype=np.int64)
        self.client_limit = client_limit

    def reserve(self, gpu_milli: int) -> Reservation:
        percent = -(-gpu_milli // MPS_STEP_MILLI)
        milli = percent * MPS_STEP_MILLI
        if milli >= MILLI:
            return _WHOLE
        return Reservation(milli, milli, milli, 1, f"{percent} %")

    def admits(self, unit: int) -> BoolArray:
        ok: BoolArray = self.clients < self.client_limit
        return ok

    def take(self, node: int, gpu: int, unit: int) -> None:
        self.clients[node, gpu] += 1


class TimeSliceRules:
    """k of R equal replicas of one GPU; no memory reserved below all R."""

    def __init__(self, shape: tuple[int, int], replicas: int) -> None:
        if replicas < 2:
            raise ValueError(f"time-slicing needs at least 2 replicas a GPU, not {replicas}")
        self.replicas = replicas
        self.used: IntArray = np.zeros(shape, dtype=np.int64)

    def reserve(self, gpu_milli: int) -> Reservation:
        k = -(-gpu_milli * self.replicas // MILLI)
        if k >= self.replicas:
            return _WHOLE
        compute = k * MILLI / self.replicas
        label = f"{k}/{self.replicas} replicas"
        return Reservation(k * MILLI // self.replicas, compute, gpu_milli, k, label)

    def admits(self, unit: int) -> BoolArray:
        ok: BoolArray = self.used + unit <= self.replicas
        return ok

    def take(self, node: int, gpu: int, unit: int) -> None:
        self.used[node, gpu] += unit


@dataclass(frozen=True, slots=True)
class MigTable:
    """Every layout of MIG instances reachable on a GPU, and what adding each profile makes of it.

    `next_layout[layout, p]` is the layout after adding `profiles[p]` at its best start, or -1
    when MIG's placement rules do not admit it. Layout 0 is the empty GPU.
    """

    geometry: MigGeometry
    profiles: tuple[MigProfile, ...]  # what a share can get, smallest first (not the whole GPU)
    next_layout: IntArray


@cache
def mig_table(model: str = MIG_MODEL) -> MigTable:
    found = gpu_model(model)
    if found is None or found.mig is None:
        raise ValueError(f"{model} is not a MIG-capable GPU in the catalog")
    geometry = found.mig
    profiles = tuple(
        sorted(
            (
                p
                for p in geometry.profiles
                if not p.is_variant and p.compute_slices < geometry.compute_slices
            ),
            key=lambda p: (p.compute_slices, p.memory_slices),
        )
    )
    empty = (0, 0, (0,) * len(profiles))
    index = {empty: 0}
    queue = [empty]
    rows: list[list[int]] = []
    while len(rows) < len(queue):
        mask, compute, counts = queue[len(rows)]
        row: list[int] = []
        for p, profile in enumerate(profiles):
            starts = free_starts(
                geometry, profile, mask=mask, compute_used=compute, count=counts[p]
            )
            if not starts:
                row.append(-1)
                continue
            start = max(
                starts, key=lambda s: (room_left(geometry, mask | slot_mask(profile, s)), -s)
            )
            grown = tuple(c + (i == p) for i, c in enumerate(counts))
            after = (mask | slot_mask(profile, start), compute + profile.compute_slices, grown)
            if after not in index:
                index[after] = len(queue)
                queue.append(after)
            row.append(index[after])
        rows.append(row)
    return MigTable(geometry, profiles, np.array(rows, dtype=np.int64))


class MigRules:
    """The smallest profile holding the share on compute and memory, placed by MIG's rules."""

    def __init__(self, shape: tuple[int, int], table: MigTable | None = None) -> None:
        self.table = table if table is not None else mig_table()
        self.layout: IntArray = np.zeros(shape, dtype=np.int64)

    def reserve(self, gpu_milli: int) -> Reservation:
        geometry = self.table.geometry
        for p, profile in enumerate(self.table.profiles):
            if (
                profile.compute_slices * MILLI >= gpu_milli * geometry.compute_slices
                and profile.memory_slices * MILLI >= gpu_milli * geometry.memory_slices
            ):
                return Reservation(
                    profile.compute_slices * MILLI // geometry.compute_slices,
                    profile.compute_slices * MILLI / geometry.compute_slices,
                    profile.memory_slices * MILLI / geometry.memory_slices,
                    p,
                    profile.name,
                )
        return _WHOLE

    def admits(self, unit: int) -> BoolArray:
        ok: BoolArray = self.table.next_layout[self.layout, unit] >= 0
        return ok

    def take(self, node: int, gpu: int, unit: int) -> None:
        after = int(self.table.next_layout[self.layout[node, gpu], unit])
        if after < 0:
            raise ValueError(f"MIG does not admit {self.table.profiles[unit].name} on that GPU")
        self.layout[node, gpu] = after


def rules_for(
    mode: IsolationMode,
    shape: tuple[int, int],
    *,
    time_slice_replicas: int = DEFAULT_TIME_SLICE_REPLICAS,
) -> SharingRules:
    if mode is IsolationMode.DEDICATED:
        return DedicatedRules(shape)
    if mode is IsolationMode.MIG:
        return MigRules(shape)
    if mode is IsolationMode.MPS:
        return MpsRules(shape)
    return TimeSliceRules(shape, time_slice_replicas)


@dataclass(slots=True)
class _SharingState(ClusterState):
    """The replay's state, where a fractional pod also needs a GPU its mode admits (`admits`)."""

    admits: BoolArray = field(default_factory=lambda: np.ones((0, 0), dtype=np.bool_))

    def feasible(self, pod: TracePod) -> BoolArray:
        ok = ClusterState.feasible(self, pod)
        if pod.is_shared:
            ok &= (self.admits & (self.gpu_left >= pod.gpu_milli)).any(axis=1)
        return ok


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The tallies of one replay at one moment; milli amounts are in milli-GPUs."""

    arrived_milli: int  # GPU request arrived so far, as asked
    asked_milli: int  # GPU request of the placed pods, as asked
    reserved_milli: float  # GPU compute the placed pods took in the mode
    stranded_memory_milli: float  # GPU memory reserved beyond what placed pods need
    gpus_in_use: int  # GPUs holding at least one pod
    failed_pods: int
    failed_reserved_milli: float  # what the failed pods would have taken
    pods: int  # pods arrived so far

    @property
    def gpus_needed(self) -> int:
        """GPUs in use, plus the failed pods' reservations packed perfectly onto more GPUs: a
        lower bound on the GPUs that would hold every arrived pod."""
        return self.gpus_in_use + math.ceil(self.failed_reserved_milli / MILLI - 1e-9)


@dataclass(frozen=True, slots=True)
class ModeResult:
    mode: IsolationMode
    seed: int
    capacity_milli: int
    at_full: Snapshot  # when the arrived request reaches 100 % of capacity
    at_end: Snapshot


def compare_mode(
    nodes: Sequence[TraceNode],
    pods: Sequence[TracePod],
    mode: IsolationMode,
    *,
    seed: int,
    policy: str = "best-fit",
    inflate: float = 1.3,
    time_slice_replicas: int = DEFAULT_TIME_SLICE_REPLICAS,
    on_progress: ProgressCallback | None = None,
) -> ModeResult:
    """Replay the trace as `replay` does, each fractional pod taking what `mode` reserves."""
    rng = np.random.default_rng(seed)
    base, order = start_replay(nodes, pods, inflate=inflate, rng=rng)
    capacity = base.capacity_milli
    state = _SharingState(**{f.name: getattr(base, f.name) for f in fields(ClusterState)})
    shape = (state.gpu_left.shape[0], state.gpu_left.shape[1])
    rules = rules_for(mode, shape, time_slice_replicas=time_slice_replicas)
    as_reserved = _reserved_pods(pods, rules)
    chosen = policy_named(policy, [as_reserved[p][0] for p in pods])
    tally = _Tally()
    full: Snapshot | None = None
    for done, pod in enumerate(order, start=1):
        if full is None and tally.arrived_milli + pod.total_gpu_milli > capacity:
            full = tally.snapshot()
        tally.arrived_milli += pod.total_gpu_milli
        tally.pods += 1
        placed, reservation = as_reserved[pod]
        if reservation is not None:
            state.admits = rules.admits(reservation.unit)
        choice = choose(state, placed, chosen, rng)
        compute = reservation.compute_milli if reservation else float(placed.total_gpu_milli)
        if choice is None:
            tally.failed_pods += 1
            tally.failed_reserved_milli += compute
        else:
            gpus = choice.gpus
            if reservation is not None and not state.admits[choice.node, gpus[0]]:
                gpus = (_admitting_gpu(state, choice.node, placed.gpu_milli),)
            tally.gpus_in_use += int((state.gpu_left[choice.node, list(gpus)] == MILLI).sum())
            state.place(choice.node, placed, gpus)
            if reservation is not None:
                rules.take(choice.node, gpus[0], reservation.unit)
            tally.asked_milli += pod.total_gpu_milli
            tally.reserved_milli += compute
            if reservation is not None or (pod.is_shared and placed.gpu_milli == MILLI):
                memory = reservation.memory_milli if reservation else float(MILLI)
                tally.stranded_memory_milli += memory - pod.gpu_milli
        if on_progress is not None and (done % 256 == 0 or done == len(order)):
            on_progress(done, len(order))
    end = tally.snapshot()
    return ModeResult(mode, seed, capacity, full if full is not None else end, end)


def _reserved_pods(
    pods: Iterable[TracePod], rules: SharingRules
) -> dict[TracePod, tuple[TracePod, Reservation | None]]:
    """Per trace pod: the pod as the mode places it, and its reservation when it still shares."""
    out: dict[TracePod, tuple[TracePod, Reservation | None]] = {}
    for pod in pods:
        if not pod.is_shared:
            out[pod] = (pod, None)
            continue
        reservation = rules.reserve(pod.gpu_milli)
        placed = TracePod(
            pod.name,
            pod.cpu_milli,
            pod.memory_mib,
            1,
            reservation.state_milli,
            pod.gpu_models,
        )
        out[pod] = (placed, None if reservation.whole else reservation)
    return out


def _admitting_gpu(state: _SharingState, node: int, milli: int) -> int:
    """The GPU on `node` with least room among those the mode admits the share on."""
    slots = np.flatnonzero(state.admits[node] & (state.gpu_left[node] >= milli))
    return int(slots[np.argmin(state.gpu_left[node, slots])])


@dataclass(slots=True)
class _Tally:
    """The running `Snapshot` of a replay (same fields)."""

    arrived_milli: int = 0
    asked_milli: int = 0
    reserved_milli: float = 0.0
    stranded_memory_milli: float = 0.0
    gpus_in_use: int = 0
    failed_pods: int = 0
    failed_reserved_milli: float = 0.0
    pods: int = 0

    def snapshot(self) -> Snapshot:
        return Snapshot(**{f.name: getattr(self, f.name) for f in fields(Snapshot)})


@dataclass(frozen=True, slots=True)
class ModeSummary:
    """One mode's figures, each the mean over the seeds (percentages of the cluster's GPUs)."""

    mode: IsolationMode
    at: str  # "100%": when the arrived request reaches capacity; "end": after the last pod
    seeds: int
    arrived_percent: float
    gpus_in_use: float
    gpus_needed: float
    asked_percent: float  # allocation ratio of the useful work: what placed pods asked for
    reserved_percent: float  # allocation ratio of what the mode took for them
    stranded_memory_gpus: float  # in GPUs' worth of memory
    stranded_memory_percent: float  # of the cluster's GPU memory
    failed_pods: float
    pods: float


def summarise(results: Iterable[ModeResult]) -> list[ModeSummary]:
    """Per mode (in order of first appearance), at 100 % and at the end: the means over seeds."""
    by_mode: dict[IsolationMode, list[ModeResult]] = {}
    for result in results:
        by_mode.setdefault(result.mode, []).append(result)
    rows: list[ModeSummary] = []
    for mode, runs in by_mode.items():
        for at in ("100%", "end"):
            shots = [(r.at_full if at == "100%" else r.at_end, r.capacity_milli) for r in runs]
            rows.append(_mean_row(mode, at, shots))
    return rows


def _mean_row(mode: IsolationMode, at: str, shots: Sequence[tuple[Snapshot, int]]) -> ModeSummary:
    def mean(values: Iterable[float]) -> float:
        found = list(values)
        return sum(found) / len(found)

    return ModeSummary(
        mode=mode,
        seeds=len(shots),
        at=at,
        arrived_percent=mean(s.arrived_milli * 100 / c for s, c in shots),
        gpus_in_use=mean(s.gpus_in_use for s, _ in shots),
        gpus_needed=mean(s.gpus_needed for s, _ in shots),
        asked_percent=mean(s.asked_milli * 100 / c for s, c in shots),
        reserved_percent=mean(s.reserved_milli * 100 / c for s, c in shots),
        stranded_memory_gpus=mean(s.stranded_memory_milli / MILLI for s, _ in shots),
        stranded_memory_percent=mean(s.stranded_memory_milli * 100 / c for s, c in shots),
        failed_pods=mean(s.failed_pods for s, _ in shots),
        pods=mean(s.pods for s, _ in shots),
    )


#: the summary's fields, then the GPUs needed over the dedicated mode's
CSV_HEADER: tuple[str, ...] = (*(f.name for f in fields(ModeSummary)), "gpus_needed_vs_dedicated")


def vs_dedicated(rows: Sequence[ModeSummary], row: ModeSummary) -> float | None:
    """The row's GPUs needed as a multiple of the dedicated mode's at the same moment."""
    for base in rows:
        if base.mode is IsolationMode.DEDICATED and base.at == row.at and base.gpus_needed:
            return row.gpus_needed / base.gpus_needed
    return None


def csv_text(rows: Sequence[ModeSummary]) -> str:
    """The summary as CSV, one line per mode and moment (means over seeds, 4 decimals)."""
    lines = [",".join(CSV_HEADER)]
    for row in rows:
        values = [getattr(row, name) for name in CSV_HEADER[3:-1]]
        cells = [f"{v:.4f}" for v in values]
        ratio = vs_dedicated(rows, row)
        cells.append("" if ratio is None else f"{ratio:.4f}")
        lines.append(",".join([row.mode.value, row.at, str(row.seeds), *cells]))
    return "\n".join(lines) + "\n"
