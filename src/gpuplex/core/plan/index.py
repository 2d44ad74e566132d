"""Finding the best GPU for a replica quickly, at fleet scale.

GPUs of one group (same model, pool and MIG policy) are interchangeable but for what is on them, so each
group keeps its GPUs sorted by state: empty GPUs by placement order; MIG GPUs bucketed by occupied-slot
signature (a few hundred buckets at most, however many GPUs); MPS and time-slice GPUs sorted by free
memory. A search asks each bucket once instead of every GPU, then scores the best few candidates.

Scores are tuples, smaller is better. binpack: join a used GPU before opening an empty one, then the
tightest fit, then the choice that leaves the most MIG room. spread: the opposite. fragmentation:
binpack for dedicated and MIG replicas; a share goes to the GPU state where fragmentation against
the plan's shares grows least (share_fragmentation.py), ties as binpack breaks them.

With a Kubernetes target every candidate must also keep its node to one sharing method
(node_sharing.py), and an empty GPU is taken on a node already in use before one on an untouched
node: an untouched node can still take any method, so it is kept for work that needs a new one.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from gpuplex.core.catalog import MPS_CLIENT_LIMIT, MPS_THREAD_PERCENT, MigProfile
from gpuplex.core.plan.demand import DemandKey, Sized, Unit, demand_key, size_on
from gpuplex.core.plan.inventory import GpuSlot
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.node_sharing import NodeKind, NodeSharing, kind_verdict
from gpuplex.core.plan.occupancy import (
    GpuState,
    Hold,
    MigChoice,
    MigChoices,
    fit_on,
    sharing_problem,
)
from gpuplex.core.plan.sorted_lists import EmptyGpus, Order, add_sorted, remove_sorted
from gpuplex.core.spec import PlacementPolicy, TenantSpec
from gpuplex.core.spec.pools import pool_accepts
from gpuplex.core.target import Target

if TYPE_CHECKING:  # numpy, which the fragmentation scores use, loads only under that policy
    from gpuplex.core.plan.share_fragmentation import ShareFragmentation

Score = tuple[int, int, int, Order]


@dataclass(frozen=True, slots=True)
class Candidate:
    gpu_ids: tuple[int, ...]
    sized: Sized
    mig_start: int | None
    score: Score
    reason: str


class GroupIndex:
    """The GPUs of one model in one pool, sorted by what is on them. Empty GPUs are listed once
    for MIG use and once for whole-GPU use (dedicated, MPS, time-slicing), each as its MIG policy
    allows. A share GPU with no room left (MPS out of threads or clients, no free memory) is in no
    list: searches never walk past it."""

    def __init__(self, slots: list[GpuSlot], node_kinds: dict[str, NodeKind] | None) -> None:
        self.first = slots[0]
        self.gpu_ids = [slot.gpu_id for slot in slots]
        self.runs_mig = any(slot.runs_mig for slot in slots)
        self.runs_whole = any(slot.runs_whole for slot in slots)
        self.mode_counts: Counter[Mode | None] = Counter()
        self.empty_mig = EmptyGpus()
        self.empty_whole = EmptyGpus()
        self.empty_by_node: dict[str, list[tuple[Order, int]]] = {}  # for whole-GPU use
        # the nodes with an empty GPU for whole-GPU use, as (how many, first one's order, node):
        # a multi-GPU replica finds its node by bisection, not by a scan of every node
        self.nodes_by_free: list[tuple[int, Order, str]] = []
        self.mig: dict[tuple[int, int, tuple[str, ...]], list[tuple[Order, int]]] = {}
        self.shares: dict[Mode, list[tuple[int, Order, int]]] = {Mode.MPS: [], Mode.TIMESLICE: []}
        # the MPS GPUs of `shares` again, by the thread percentage left on them: a search for a
        # share asks only the lists with threads enough, never walking past GPUs that lack them
        self.mps_by_threads_left: dict[int, list[tuple[int, Order, int]]] = {}
        self.sized: dict[DemandKey, Sized | None] = {}  # size_on on this group's model
        geometry = self.first.model.mig
        self.mig_choices = MigChoices(geometry) if geometry is not None else None
        # With a Kubernetes target, the empty GPUs again, for MIG use (True) and whole-GPU use
        # (False), by the kind of their node as `node_kinds` has it (NodeSharing.kinds): the
        # first free GPU a mode may take is then the first of a few lists, not a scan of them all.
        self.node_kinds = node_kinds
        self.empty_by_kind: dict[bool, dict[NodeKind, EmptyGpus]] = {
            True: {},
            False: {},
        }

    def take_out(self, state: GpuState) -> None:
        slot = state.slot
        self.mode_counts[state.mode] -= 1
        if state.is_empty:
            if slot.runs_mig:
                self.empty_mig.remove((slot.order, slot.gpu_id))
            if slot.runs_whole:
                self.empty_whole.remove((slot.order, slot.gpu_id))
                self._change_node(
                    slot.node, lambda free: remove_sorted(free, (slot.order, slot.gpu_id))
                )
            if self.node_kinds is not None:
                self.unfile(state, self.node_kinds[slot.node])
        elif state.mode is Mode.MIG:
            remove_sorted(self.mig[state.mig_signature], (slot.order, slot.gpu_id))
        elif state.mode in self.shares and has_room(state):
            entry = (state.free_memory_mib, slot.order, slot.gpu_id)
            remove_sorted(self.shares[state.mode], entry)
            if state.mode is Mode.MPS:
                remove_sorted(
                    self.mps_by_threads_left[MPS_THREAD_PERCENT - state.threads_used], entry
                )

    def put_in(self, state: GpuState) -> None:
        slot = state.slot
        self.mode_counts[state.mode] += 1
        if state.is_empty:
            if slot.runs_mig:
                self.empty_mig.add((slot.order, slot.gpu_id))
            if slot.runs_whole:
                self.empty_whole.add((slot.order, slot.gpu_id))
                self._change_node(slot.node, lambda free: insort(free, (slot.order, slot.gpu_id)))
            if self.node_kinds is not None:
                self.file(state, self.node_kinds[slot.node])
        elif state.mode is Mode.MIG:
            insort(self.mig.setdefault(state.mig_signature, []), (slot.order, slot.gpu_id))
        elif state.mode in self.shares and has_room(state):
            entry = (state.free_memory_mib, slot.order, slot.gpu_id)
            insort(self.shares[state.mode], entry)
            if state.mode is Mode.MPS:
                left = MPS_THREAD_PERCENT - state.threads_used
                insort(self.mps_by_threads_left.setdefault(left, []), entry)

    def put_in_empty(self, states: list[GpuState]) -> None:
        """`put_in` of empty GPUs not listed yet, each list sorted once: inserting a fleet's GPUs
        one by one in order moves every entry of the empty lists each time (2 s of the plan at
        80,000 GPUs)."""
        mig: list[tuple[Order, int]] = []
        whole: list[tuple[Order, int]] = []
        by_node: dict[str, list[tuple[Order, int]]] = {}
        by_kind: dict[bool, dict[NodeKind, list[tuple[Order, int]]]] = {True: {}, False: {}}
        for state in states:
            if not state.is_empty:
                raise ValueError(f"GPU {state.slot.gpu_id} is not empty")  # a caller's bug
            slot = state.slot
            entry = (slot.order, slot.gpu_id)
            self.mode_counts[state.mode] += 1
            kind = None if self.node_kinds is None else self.node_kinds[slot.node]
            for for_mig, runs, listed in (
                (True, slot.runs_mig, mig),
                (False, slot.runs_whole, whole),
            ):
                if runs:
                    listed.append(entry)
                    if kind is not None:
                        by_kind[for_mig].setdefault(kind, []).append(entry)
            if slot.runs_whole:
                by_node.setdefault(slot.node, []).append(entry)
        self.empty_mig.add_all(mig)
        self.empty_whole.add_all(whole)
        for for_mig, kinds in by_kind.items():
            for kind, entries in kinds.items():
                self.empty_by_kind[for_mig].setdefault(kind, EmptyGpus()).add_all(entries)
        for node, entries in by_node.items():
            self._change_node(node, partial(add_sorted, more=entries))

    def file(self, state: GpuState, kind: NodeKind) -> None:
        """List an empty GPU under its node's kind (Kubernetes target)."""
        slot = state.slot
        for for_mig, runs in ((True, slot.runs_mig), (False, slot.runs_whole)):
            if runs:
                self.empty_by_kind[for_mig].setdefault(kind, EmptyGpus()).add(
                    (slot.order, slot.gpu_id)
                )

    def unfile(self, state: GpuState, kind: NodeKind) -> None:
        slot = state.slot
        for for_mig, runs in ((True, slot.runs_mig), (False, slot.runs_whole)):
            if runs:
                self.empty_by_kind[for_mig][kind].remove((slot.order, slot.gpu_id))

    def _change_node(self, node: str, change: Callable[[list[tuple[Order, int]]], object]) -> None:
        """Change the node's empty GPUs, keeping its entry in `nodes_by_free` in step."""
        free = self.empty_by_node.setdefault(node, [])
        if free:
            remove_sorted(self.nodes_by_free, (len(free), free[0][0], node))
        change(free)
        if free:
            insort(self.nodes_by_free, (len(free), free[0][0], node))

    def nodes_with_free(self, need: int, most_first: bool) -> Iterator[str]:
        """The nodes with at least `need` empty GPUs: fewest first (binpack) or most first
        (spread), ties by the order of their first empty GPU."""
        listed = self.nodes_by_free
        start = bisect_left(listed, (need,))
        if not most_first:
            for _, _, node in listed[start:]:
                yield node
            return
        end = len(listed)
        while end > start:  # runs of one count, the largest first; each in order
            run = bisect_left(listed, (listed[end - 1][0],), start, end)
            for _, _, node in listed[run:end]:
                yield node
            end = run


def has_room(state: GpuState) -> bool:
    """Whether a share GPU can take any further client at all."""
    if state.free_memory_mib <= 0:
        return False
    return state.mode is not Mode.MPS or (
        state.threads_used < MPS_THREAD_PERCENT and state.clients < MPS_CLIENT_LIMIT
    )


class FleetIndex:
    """`share_fragmentation` scores shares under the fragmentation policy (and only there); a
    Kubernetes `target` keeps each node to one sharing method."""

    def __init__(
        self,
        slots: list[GpuSlot],
        policy: PlacementPolicy,
        tenants: dict[str, TenantSpec],
        share_fragmentation: ShareFragmentation | None = None,
        target: Target = Target.HOST,
    ) -> None:
        if (policy is PlacementPolicy.FRAGMENTATION) != (share_fragmentation is not None):
            raise ValueError("the fragmentation policy, and only it, needs a ShareFragmentation")
        self.states = [GpuState(slot) for slot in slots]
        self.spread = policy is PlacementPolicy.SPREAD
        self.share_fragmentation = share_fragmentation
        self.tenants = tenants
        self.node_sharing = NodeSharing(self.states) if target is Target.KUBERNETES else None
        grouped: dict[tuple[object, ...], list[GpuSlot]] = {}
        for slot in slots:
            grouped.setdefault(slot.group, []).append(slot)
        kinds = None if self.node_sharing is None else self.node_sharing.kinds
        self.groups = [GroupIndex(members, kinds) for members in grouped.values()]
        self.held_priorities: Counter[int] = Counter()  # priorities of placed replicas
        self.group_of = {slot.gpu_id: g for g in self.groups for slot in grouped[g.first.group]}
        for group in self.groups:
            group.put_in_empty([self.states[gpu_id] for gpu_id in group.gpu_ids])

    def candidate_groups(self, unit: Unit) -> Iterator[tuple[GroupIndex, Sized]]:
        for group in self.groups:
            slot = group.first
            runs = group.runs_mig if unit.mode is Mode.MIG else group.runs_whole
            if not pool_accepts(slot.pool, unit.pool) or not runs:
                continue
            key = demand_key(unit)
            if key not in group.sized:
                group.sized[key] = size_on(unit, slot.model)
            sized = group.sized[key]
            if sized is not None:
                yield group, sized

    def node_problem(self, unit: Unit, node: str) -> str | None:
        """Why the node may not take the unit's mode (Kubernetes target only), or None."""
        return None if self.node_sharing is None else self.node_sharing.problem(unit, node)

    def fit(self, unit: Unit, sized: Sized, state: GpuState) -> int | str:
        """`fit_on`, and with a Kubernetes target the node's one sharing method."""
        fit = fit_on(unit, sized, state, self.tenants)
        if isinstance(fit, str):
            return fit
        return self.node_problem(unit, state.slot.node) or fit

    def fit_lifted(self, unit: Unit, sized: Sized, state: GpuState) -> int | str:
        """`fit` on a state the caller changed without the index (preemption lifts replicas off
        it to try a fit): the node's sharing method is read from its states as they are."""
        fit = fit_on(unit, sized, state, self.tenants)
        if isinstance(fit, str) or self.node_sharing is None:
            return fit
        return self.node_sharing.problem_now(unit, state.slot.node) or fit

    def first_open(self, unit: Unit, group: GroupIndex, for_mig: bool) -> tuple[Order, int] | None:
        """The first empty GPU of the group for MIG use (`for_mig`) or whole-GPU use; with a
        Kubernetes target, the first whose node may take the unit's mode, on a node already in
        use if there is one."""
        if self.node_sharing is None:
            return (group.empty_mig if for_mig else group.empty_whole).first()
        firsts: list[tuple[Order, int] | None] = [None, None, None]  # by kind_verdict
        for kind, entries in group.empty_by_kind[for_mig].items():
            head = entries.first()
            if head is not None:
                verdict = kind_verdict(unit.mode, kind)
                first = firsts[verdict]
                if first is None or head < first:
                    firsts[verdict] = head
        return firsts[2] if firsts[2] is not None else firsts[1]

    def policy_for(self, unit: Unit) -> str:
        """The rule that placed `unit`, as a plan reason names it."""
        if self.share_fragmentation is not None:
            from gpuplex.core.plan.share_fragmentation import SHARE_MODES

            if unit.mode in SHARE_MODES:
                return PlacementPolicy.FRAGMENTATION.value
        return PlacementPolicy.SPREAD.value if self.spread else PlacementPolicy.BINPACK.value

    def search(self, unit: Unit, refuse: Callable[[Sized], str | None]) -> Candidate | None:
        """The best place for `unit`; `refuse` vetoes a demand (quota) before any GPU is looked at."""
        best: Candidate | None = None
        for group, sized in self.candidate_groups(unit):
            if refuse(sized) is not None:
                continue
            for candidate in self._candidates(group, unit, sized):
                if best is None or candidate.score < best.score:
                    best = candidate
        return best

    def _candidates(self, group: GroupIndex, unit: Unit, sized: Sized) -> Iterator[Candidate]:
        if unit.mode is Mode.DEDICATED:
            yield from self._dedicated(group, unit, sized)
        elif unit.mode is Mode.MIG:
            yield from self._mig(group, unit, sized)
        elif self.share_fragmentation is not None:
            yield from self._shares_by_fragmentation(group, unit, sized, self.share_fragmentation)
        else:
            yield from self._shares(group, unit, sized)

    def _dedicated(self, group: GroupIndex, unit: Unit, sized: Sized) -> Iterator[Candidate]:
        need = unit.gpu_count
        if need == 1:
            first = self.first_open(unit, group, for_mig=False)
            if first is not None:
                order, gpu_id = first
                yield Candidate((gpu_id,), sized, None, (1, 0, 0, order), "first free GPU")
            return
        node = next(
            (
                found
                for found in group.nodes_with_free(need, most_first=self.spread)
                if self.node_problem(unit, found) is None
            ),
            None,
        )
        if node is None:
            return
        pick = group.empty_by_node[node]
        leftover = len(pick) - need
        score = (1, -leftover if self.spread else leftover, 0, pick[0][0])
        why = "node with the most free GPUs" if self.spread else "node with the fewest free GPUs"
        yield Candidate(tuple(g for _, g in pick[:need]), sized, None, score, f"{why} that fit")

    def _mig(self, group: GroupIndex, unit: Unit, sized: Sized) -> Iterator[Candidate]:
        """The first GPU the unit's tenant may share of each MIG signature the profile fits,
        and the first empty GPU."""
        choices, profile = group.mig_choices, sized.profile
        if choices is None or profile is None:
            return
        empty = self.first_open(unit, group, for_mig=True)
        for signature, members in group.mig.items():
            choice = choices.on(profile, signature) if members else None
            if choice is None:
                continue
            found = next(
                (
                    (order, gpu_id)
                    for order, gpu_id in members
                    if sharing_problem(unit, self.states[gpu_id], self.tenants) is None
                    and self.node_problem(unit, self.states[gpu_id].slot.node) is None
                ),
                None,
            )
            if found is not None:
                yield self._mig_candidate(found, sized, profile, choice, opens=False)
        if empty is not None:  # an empty GPU: no tenant, and a node that may take MIG
            choice = choices.on(profile, (0, 0, ()))
            if choice is not None:
                yield self._mig_candidate(empty, sized, profile, choice, opens=True)

    def _mig_candidate(
        self,
        at: tuple[Order, int],
        sized: Sized,
        profile: MigProfile,
        choice: MigChoice,
        *,
        opens: bool,
    ) -> Candidate:
        (order, gpu_id), opened = at, int(opens)
        if self.spread:
            score = (opened ^ 1, -choice.free_after, -choice.room_after, order)
        else:
            score = (opened, choice.free_after, -choice.room_after, order)
        where = "an empty GPU" if opens else "a partly used GPU"
        reason = f"{profile.name}@{choice.start} on {where}"
        return Candidate((gpu_id,), sized, choice.start, score, reason)

    def _shares(self, group: GroupIndex, unit: Unit, sized: Sized) -> Iterator[Candidate]:
        """The used GPU of the unit's mode it fits tightest (binpack: the first by free memory,
        then order; spread: the last), and the first empty GPU."""
        need = sized.memory_mib
        if unit.mode is Mode.MPS:
            threads = sized.thread_percent or 0
            lists = [v for left, v in group.mps_by_threads_left.items() if left >= threads]
        else:
            lists = [group.shares[unit.mode]]
        best: tuple[int, Order, int] | None = None
        for used in lists:  # the best of each list's first fit (spread: last) is the best of all
            first = bisect_left(used, (need,))
            at = range(len(used) - 1, first - 1, -1) if self.spread else range(first, len(used))
            for i in at:
                entry = used[i]
                if best is not None and (entry <= best if self.spread else entry >= best):
                    break  # nothing further in this list beats the best found
                if isinstance(self.fit(unit, sized, self.states[entry[2]]), int):
                    best = entry
                    break
        if best is not None:
            free, order, gpu_id = best
            left = free - need
            score = (1, -left, 0, order) if self.spread else (0, left, 0, order)
            yield Candidate((gpu_id,), sized, None, score, f"shares a {unit.mode} GPU")
        empty = self.first_open(unit, group, for_mig=False)
        if empty is not None:
            order, gpu_id = empty
            left = group.first.model.memory_mib - need
            score = (0, -left, 0, order) if self.spread else (1, left, 0, order)
            yield Candidate((gpu_id,), sized, None, score, f"opens a GPU for {unit.mode}")

    def _shares_by_fragmentation(
        self, group: GroupIndex, unit: Unit, sized: Sized, scorer: ShareFragmentation
    ) -> Iterator[Candidate]:
        """Every distinct state a share may join (the first GPU in order of each), and the first
        empty GPU, scored once each; ties go as binpack's: a used GPU, the tightest, the first.
        Unlike binpack's search, this walks every used GPU of the group with room for the share."""
        from gpuplex.core.plan.share_fragmentation import ShareSpot

        need = sized.memory_mib
        used = group.shares[unit.mode]
        joins: dict[ShareSpot, tuple[Order, int]] = {}
        for free, order, gpu_id in used[bisect_left(used, (need,)) :]:
            state = self.states[gpu_id]
            spot = ShareSpot(free, state.threads_used)
            if spot not in joins and isinstance(self.fit(unit, sized, state), int):
                joins[spot] = (order, gpu_id)
        spots = [(spot, order, gpu_id, 0) for spot, (order, gpu_id) in joins.items()]
        empty = self.first_open(unit, group, for_mig=False)
        if empty is not None:
            order, gpu_id = empty
            spots.append((ShareSpot(group.first.model.memory_mib, 0), order, gpu_id, 1))
        if not spots:
            return
        scores = scorer.scores(group.first.group, unit.mode, sized, [s[0] for s in spots])
        for (spot, order, gpu_id, opens), score in zip(spots, scores, strict=True):
            where = f"opens a GPU for {unit.mode}" if opens else f"shares a {unit.mode} GPU"
            yield Candidate(
                (gpu_id,),
                sized,
                None,
                (-score.key, opens, spot.free_memory_mib - need, order),
                f"{where}, F grows least (FGD score {score.fgd_score})",
            )

    def assign(self, unit: Unit, candidate: Candidate) -> Hold:
        hold = Hold(unit, candidate.sized, candidate.mig_start, candidate.gpu_ids)
        self.put_back(hold)
        return hold

    def put_back(self, hold: Hold) -> None:
        """Hold `hold` where it says; also undoes `release` after a trial eviction."""
        for gpu_id in hold.gpu_ids:
            self._update(gpu_id, lambda state: state.add(hold))
        self.held_priorities[hold.unit.priority] += 1

    def release(self, hold: Hold) -> None:
        self.held_priorities[hold.unit.priority] -= 1
        for gpu_id in hold.gpu_ids:
            self._update(gpu_id, lambda state: state.remove(hold.unit.key))

    def _update(self, gpu_id: int, change: Callable[[GpuState], object]) -> None:
        state, group = self.states[gpu_id], self.group_of[gpu_id]
        group.take_out(state)
        change(state)
        if self.node_sharing is not None:
            node = state.slot.node
            before, after = self.node_sharing.refresh(node)
            if before != after:  # the node's other empty GPUs move to the lists of its new kind
                for other in self.node_sharing.states_on(node):
                    if other is not state and other.is_empty:
                        self.group_of[other.slot.gpu_id].unfile(other, before)
                        self.group_of[other.slot.gpu_id].file(other, after)
        group.put_in(state)
