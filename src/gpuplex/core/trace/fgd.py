"""FGD, Fragmentation Gradient Descent (Weng et al., USENIX ATC '23): the paper's own policy. Pure.

The node, and for a shared pod the GPU on it, where the node's fragmentation against the workload's
typical pods (see `gpuplex.core.fragmentation`) grows least, scored
100 * sigmoid((F before - F after) / 1000) in whole points as kube-scheduler scores are
(`fragmentation.scores.fgd_points`); equal scores go to the tie-break order. A shared pod takes
the first GPU with the best score, whole GPUs the lowest-numbered free ones.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuplex.core.fragmentation.measure import (
    FragmentationModel,
    RememberedFragmentation,
    typical_pods,
)
from gpuplex.core.fragmentation.model import BoolArray, IntArray, TracePod
from gpuplex.core.fragmentation.scores import fgd_points
from gpuplex.core.trace.model import ClusterState, FeasibleShape
from gpuplex.core.trace.policies import Choice, Policy, pick_best_gpu

#: up to this many nodes, `FgdScorer` scores in plain Python rather than numpy calls
FEW_NODES = 16
#: `FgdScorer` forgets the node states it has met, and their scores, past this many
STATE_LIMIT = 1_000_000

#: what a pod's score on a node depends on besides the node: the pod's request shape
ShapeKey = tuple[int, int, int, tuple[str, ...]]
#: what a pod's score depends on of a node: its GPU model's position, its free CPU and its free
#: milli per GPU in ascending order (a *node state*)
NodeState = tuple[int, int, tuple[int, ...]]
#: the key of a node a pod does not fit on, in `_Standing`
UNFIT = np.iinfo(np.int64).min


@dataclass(slots=True)
class _ShapeTable:
    """One request shape's key on each node state met (by state number), whether it is known
    yet, and for a shared pod the GPUs it scores best on: as bits, bit i for the i-th GPU in
    ascending order of room."""

    key: IntArray
    known: BoolArray
    best: IntArray
    #: FGD's points and best GPUs (as in `best`) per *coarse* node state: FGD's score depends on
    #: the node's free CPU only through the typical pods it can feed before and after the pod
    #: (`RememberedFragmentation.cpu_step`), so many states share them
    fgd: dict[tuple[int, int, int, tuple[int, ...]], tuple[int, int]]

    @classmethod
    def empty(cls, size: int) -> _ShapeTable:
        return cls(
            np.zeros(size, dtype=np.int64),
            np.zeros(size, dtype=np.bool_),
            np.zeros(size, dtype=np.int64),
            {},
        )

    def grown(self, size: int) -> _ShapeTable:
        """This table, with room for at least `size` states."""
        if self.key.size >= size:
            return self
        more = _ShapeTable.empty(max(size, 2 * self.key.size) - self.key.size)
        return _ShapeTable(
            np.concatenate([self.key, more.key]),
            np.concatenate([self.known, more.known]),
            np.concatenate([self.best, more.best]),
            self.fgd,
        )


@dataclass(slots=True)
class _Standing:
    """One request shape's key and GPU slot on every node (`UNFIT` where it does not fit), up to
    date with the first `logged` entries of the change log of `state`."""

    state: ClusterState
    logged: int
    key: IntArray
    slot: IntArray


class FgdScorer:
    """FGD's scorer and GPU picker over one run's typical pods.

    A pod's score on a node depends only on the node's state (its GPU model, free CPU and free
    milli per GPU in any order) and on the pod's request shape; placements keep leaving nodes in
    states met before, on the same node or another. So each node state met gets a number, kept
    per node and renewed only for the nodes a placement changed (found in the state's log of
    placements, `ClusterState.changes`, when the state is the object seen last time; any other
    state is numbered afresh), with F of the state; and each shape's key on each state number is
    computed once, the first time a node in that state is scored for it. Subclasses turn FGD's
    score into a finer key with `keys`, which must depend on the node's state and the pod's
    shape alone.

    `choose` keeps, per request shape, its key on every node with where it fits, and checks and
    looks up again only the nodes changed since that shape last came.
    """

    def __init__(self, workload: Sequence[TracePod]) -> None:
        self.typical = typical_pods(workload)
        self._models: tuple[str, ...] | None = None
        self._frag: RememberedFragmentation | None = None
        self._state: ClusterState | None = None  # the state the node numbers were last taken of
        self._logged = 0  # how many of its `changes` they include
        self._numbers: dict[NodeState, int] = {}
        self._states: list[NodeState] = []  # by number
        self._node_state: IntArray = np.zeros(0, dtype=np.int64)  # per node: its state's number
        self._before: IntArray = np.zeros(0, dtype=np.int64)  # per state number: F x W
        self._tables: dict[ShapeKey, _ShapeTable] = {}
        self._standings: dict[FeasibleShape, _Standing] = {}
        self._earlier: BoolArray = np.zeros((0, 0), dtype=np.bool_)

    # -- node states ----------------------------------------------------------------------------

    def _sync(self, state: ClusterState) -> RememberedFragmentation:
        """Number the states of the nodes changed since the last call."""
        if self._frag is None or self._models != state.models:
            self._models = state.models
            self._frag = RememberedFragmentation(
                FragmentationModel.build(self.typical, state.models)
            )
            self._state = None
        same = (
            self._state is state
            and self._logged <= len(state.changes)
            and len(self._numbers) <= STATE_LIMIT
        )
        if same:
            if self._logged < len(state.changes):
                touched = sorted(set(state.changes[self._logged :]))
                self._logged = len(state.changes)
                self._number(state, touched)
            return self._frag
        self._state, self._logged = state, len(state.changes)
        size, width = state.gpu_left.shape
        if self._node_state.size != size or self._earlier.shape[0] != width:
            self._earlier = np.tril(np.ones((width, width), dtype=np.bool_), k=-1)
        self._numbers, self._states, self._tables = {}, [], {}
        self._node_state = np.zeros(size, dtype=np.int64)
        self._before = np.zeros(1024, dtype=np.int64)
        self._number(state, list(range(size)))
        return self._frag

    def _number(self, state: ClusterState, nodes: list[int]) -> None:
        """Note the state number of each of `nodes`, numbering the states not met before."""
        assert self._frag is not None
        numbers = self._numbers
        out: list[int] = []
        if len(nodes) <= FEW_NODES:  # one by one: cheaper than numpy calls on a few nodes
            rows = [
                (int(state.cpu_left[n]), state.gpu_left[n].tolist(), int(state.model_index[n]))
                for n in nodes
            ]
        else:
            rows = list(
                zip(
                    state.cpu_left[nodes].tolist(),
                    state.gpu_left[nodes].tolist(),
                    state.model_index[nodes].tolist(),
                    strict=True,
                )
            )
        for cpu, left, model in rows:
            key = (model, cpu, tuple(sorted(left)))
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(numbers)
                self._states.append(key)
                if number == self._before.size:
                    self._before = np.concatenate([self._before, np.zeros_like(self._before)])
                self._before[number] = self._frag.of_state(cpu, left, model)
            out.append(number)
        if len(nodes) == 1:
            self._node_state[nodes[0]] = out[0]
        else:
            self._node_state[nodes] = out

    # -- scores ---------------------------------------------------------------------------------

    def scores(
        self, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, IntArray]:
        """Per node: its key (FGD's score, or a subclass's finer key), and the GPU slot the pod
        takes there when it is a shared pod (else -1)."""
        frag = self._sync(state)
        shape = (pod.cpu_milli, pod.gpu_milli, pod.num_gpu, pod.gpu_models)
        table = self._tables.get(shape, None)
        table = (table or _ShapeTable.empty(0)).grown(len(self._numbers))
        self._tables[shape] = table
        numbers = self._node_state[nodes]
        if nodes.size <= FEW_NODES:  # one by one: cheaper than numpy calls on a few nodes
            return self._scores_on_few(frag, state, pod, nodes, numbers, table)
        unknown = ~table.known[numbers]
        if unknown.any():
            new, first = np.unique(numbers[unknown], return_index=True)
            self._score_states(frag, state, pod, nodes[unknown][first], new, table)
        slots = np.full(nodes.size, -1, dtype=np.int64)
        if pod.is_shared:
            slots = _first_of(state.gpu_left[nodes], table.best[numbers])
        return table.key[numbers], slots

    def _scores_on_few(
        self,
        frag: RememberedFragmentation,
        state: ClusterState,
        pod: TracePod,
        nodes: IntArray,
        numbers: IntArray,
        table: _ShapeTable,
    ) -> tuple[IntArray, IntArray]:
        """`scores` of a few nodes, in plain Python."""
        listed: list[int] = numbers.tolist()
        known: list[bool] = table.known[numbers].tolist()
        new = {
            n: at
            for at, (n, k) in reversed(list(enumerate(zip(listed, known, strict=True))))
            if not k
        }
        if new:
            at = list(new.values())
            self._score_states(frag, state, pod, nodes[at], numbers[at], table)
        if not pod.is_shared:
            return table.key[numbers], np.full(nodes.size, -1, dtype=np.int64)
        slots = []
        for left, best in zip(
            state.gpu_left[nodes].tolist(), table.best[numbers].tolist(), strict=True
        ):
            order = sorted(range(len(left)), key=left.__getitem__)  # stable, as `_first_of`
            slots.append(
                min((g for at, g in enumerate(order) if best >> at & 1), default=len(left))
            )
        return table.key[numbers], np.array(slots, dtype=np.int64)

    def _score_states(
        self,
        frag: RememberedFragmentation,
        state: ClusterState,
        pod: TracePod,
        nodes: IntArray,
        numbers: IntArray,
        table: _ShapeTable,
    ) -> None:
        """Score the shape on the states `numbers`, each on one of its `nodes`."""
        states = self._states
        cpu_step, asked = frag.cpu_step, pod.cpu_milli
        coarse = [
            (model, cpu_step(cpu), cpu_step(cpu - asked), gpu)
            for model, cpu, gpu in (states[n] for n in numbers.tolist())
        ]
        found = [table.fgd.get(c) for c in coarse]
        first: dict[tuple[int, int, int, tuple[int, ...]], int] = {}
        for at, (c, f) in enumerate(zip(coarse, found, strict=True)):
            if f is None and c not in first:
                first[c] = at
        if first:
            points, rooms = self._fgd(frag, state, pod, nodes[list(first.values())])
            for c, p, top in zip(first, points.tolist(), rooms, strict=True):
                table.fgd[c] = (p, sum(1 << at for at, room in enumerate(c[3]) if room in top))
            found = [table.fgd[c] for c in coarse]
        fgd = np.array([f[0] for f in found if f is not None], dtype=np.int64)
        table.key[numbers] = self.keys(state, pod, nodes, fgd)
        table.known[numbers] = True
        if pod.is_shared:
            table.best[numbers] = [f[1] for f in found if f is not None]

    def keys(self, state: ClusterState, pod: TracePod, nodes: IntArray, fgd: IntArray) -> IntArray:
        """The key a node is chosen by (higher wins): here FGD's own score."""
        return fgd

    def _fgd(
        self, frag: RememberedFragmentation, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, list[tuple[int, ...]]]:
        """FGD's score of the pod on each node and, for a shared pod, the rooms (free milli) of
        the GPUs on which it scores best (else empty)."""
        if nodes.size <= FEW_NODES:
            return self._fgd_on_few(frag, state, pod, nodes)
        cpu_after = state.cpu_left[nodes] - pod.cpu_milli
        left = state.gpu_left[nodes]
        models = state.model_index[nodes]
        before = self._before[self._node_state[nodes]]
        thresholds = frag.model.thresholds
        if pod.is_shared:
            # one candidate per node and GPU with room; equal rooms on a node give equal states,
            # so only the first GPU of each room is tried
            fits = left >= pod.gpu_milli
            same = (left[:, :, None] == left[:, None, :]) & self._earlier[None, :, :]
            rows, slots = np.nonzero(fits & ~same.any(axis=2))
            after = left[rows].copy()
            after[np.arange(rows.size), slots] -= pod.gpu_milli
            units_after = frag.units(cpu_after[rows], after, models[rows])
            per_gpu = fgd_points(before[rows] - units_after, thresholds)
            best = np.full(nodes.size, -1, dtype=np.int64)
            np.maximum.at(best, rows, per_gpu)
            top = per_gpu == best[rows]
            rooms: list[list[int]] = [[] for _ in range(nodes.size)]
            for row, room in zip(rows[top].tolist(), left[rows, slots][top].tolist(), strict=True):
                rooms[row].append(room)
            return best, [tuple(r) for r in rooms]
        after = left
        if pod.wants_gpu:
            fits = left >= pod.gpu_milli
            taken = fits & (np.cumsum(fits, axis=1) <= pod.num_gpu)  # the lowest-numbered
            after = left - np.where(taken, pod.gpu_milli, 0)
        units_after = frag.units(cpu_after, after, models)
        return fgd_points(before - units_after, thresholds), [()] * nodes.size

    def _fgd_on_few(
        self, frag: RememberedFragmentation, state: ClusterState, pod: TracePod, nodes: IntArray
    ) -> tuple[IntArray, list[tuple[int, ...]]]:
        """`_fgd` in plain Python, for a few nodes: the same candidates, and F and the points
        are whole numbers, so the same scores and rooms."""
        thresholds = frag.thresholds
        shared, milli = pod.is_shared, pod.gpu_milli
        wanted = pod.num_gpu if pod.wants_gpu else 0
        cpus: list[int] = (state.cpu_left[nodes] - pod.cpu_milli).tolist()
        lefts: list[list[int]] = state.gpu_left[nodes].tolist()
        models: list[int] = state.model_index[nodes].tolist()
        befores: list[int] = self._before[self._node_state[nodes]].tolist()
        best: list[int] = []
        rooms: list[tuple[int, ...]] = []
        for left, cpu, model, before in zip(lefts, cpus, models, befores, strict=True):
            step = frag.cpu_step(cpu)
            if shared:
                top, tops = -1, []
                ordered = sorted(left)
                for room in sorted(set(left), key=left.index):  # each room, in slot order
                    if room < milli:
                        continue
                    after = list(ordered)
                    after.remove(room)
                    insort(after, room - milli)
                    units = frag.of_sorted(model, step, tuple(after), cpu)
                    points = bisect_right(thresholds, before - units)
                    if points > top:
                        top, tops = points, [room]
                    elif points == top:
                        tops.append(room)
                best.append(top)
                rooms.append(tuple(tops))
                continue
            taken, after = 0, list(left)
            for g, room in enumerate(left):
                if taken < wanted and room >= milli:
                    after[g] -= milli  # the lowest-numbered GPUs with room
                    taken += 1
            units = frag.of_sorted(model, step, tuple(sorted(after)), cpu)
            best.append(bisect_right(thresholds, before - units))
            rooms.append(())
        return np.array(best, dtype=np.int64), rooms

    # -- the policy -----------------------------------------------------------------------------

    def score(self, state: ClusterState, pod: TracePod, nodes: IntArray) -> IntArray:
        return self.scores(state, pod, nodes)[0]

    def choose(self, state: ClusterState, pod: TracePod, rng: np.random.Generator) -> Choice | None:
        """What `policies.choose_by_scores` chooses, without touching the nodes no placement
        changed: each shape's key on every node is kept, with where it does not fit, and only
        the nodes logged as changed since are checked and scored again."""
        shape = (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_models)
        standing = self._standings.get(shape)
        if standing is None or standing.state is not state or standing.logged > len(state.changes):
            size = state.cpu_left.size
            standing = _Standing(
                state,
                len(state.changes),
                np.full(size, UNFIT, dtype=np.int64),
                np.full(size, -1, dtype=np.int64),
            )
            self._standings[shape] = standing
            self._restand(state, pod, standing, np.arange(size, dtype=np.int64))
        elif standing.logged < len(state.changes):
            changed = list(set(state.changes[standing.logged :]))
            standing.logged = len(state.changes)
            if len(changed) <= FEW_NODES:
                self._restand_few(state, pod, standing, changed)
            else:
                self._restand(state, pod, standing, np.array(changed, dtype=np.int64))
        top = standing.key.max()
        if top == UNFIT:
            return None
        best = np.flatnonzero(standing.key == top)
        node = int(best[0] if best.size == 1 else best[np.argmin(state.rank[best])])
        if pod.is_shared:
            return Choice(node, (int(standing.slot[node]),))
        if not pod.wants_gpu:
            return Choice(node, ())
        rooms: list[int] = state.gpu_left[node].tolist()  # the lowest-numbered GPUs with room
        return Choice(
            node, tuple([g for g, r in enumerate(rooms) if r >= pod.gpu_milli][: pod.num_gpu])
        )

    def _restand_few(
        self, state: ClusterState, pod: TracePod, standing: _Standing, nodes: list[int]
    ) -> None:
        """`_restand` on a few nodes, given as a list."""
        fitting = [n for n in nodes if state.fits_on(pod, n)]
        if len(fitting) < len(nodes):
            standing.key[[n for n in nodes if n not in fitting]] = UNFIT
        if fitting:
            at = np.array(fitting, dtype=np.int64)
            standing.key[at], standing.slot[at] = self.scores(state, pod, at)

    def _restand(
        self, state: ClusterState, pod: TracePod, standing: _Standing, nodes: IntArray
    ) -> None:
        """Check and score the shape again on `nodes`."""
        if nodes.size <= FEW_NODES:
            fits = np.array([state.fits_on(pod, n) for n in nodes.tolist()], dtype=np.bool_)
        else:
            fits = state.feasible_on(pod, nodes)
        standing.key[nodes[~fits]] = UNFIT
        fitting = nodes[fits]
        if fitting.size:
            standing.key[fitting], standing.slot[fitting] = self.scores(state, pod, fitting)

    def pick_gpus(
        self, state: ClusterState, node: int, pod: TracePod, rng: np.random.Generator
    ) -> tuple[int, ...]:
        if not pod.is_shared:
            return pick_best_gpu(state, node, pod, rng)
        _, slot = self.scores(state, pod, np.array([node], dtype=np.int64))
        return (int(slot[0]),)


def _first_of(left: IntArray, best: IntArray) -> IntArray:
    """Per node (`left`: free milli per GPU slot): the first slot among those `best` names, as
    bits of the GPUs' positions in ascending order of room (the number of slots when none)."""
    position = np.argsort(np.argsort(left, axis=1, kind="stable"), axis=1, kind="stable")
    named = ((best[:, None] >> position) & 1).astype(np.bool_)
    out: IntArray = np.where(named.any(axis=1), named.argmax(axis=1), left.shape[1])
    return out


def fgd_policy(workload: Sequence[TracePod]) -> Policy:
    """FGD over the typical pods of `workload` (computed once, here)."""
    fgd = FgdScorer(workload)
    return Policy("fgd", fgd.score, fgd.pick_gpus, chooser=fgd.choose)
