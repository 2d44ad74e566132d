"""Which queued jobs start in a step: the queue rules admit them, the planner places them, and the
first job no node can take gets a reservation that later work backfills around (as Slurm's
backfill). Pure.

The queue rules count capacity as amounts (`gpuplex.core.queues.admission`), not nodes, so two
things they decide may not hold on the nodes:

- a job they admit may find no node with room (eight free GPUs on two nodes are no room for an
  8-GPU job);
- the work they preempt for a job may not free room it can use (1-GPU jobs stopped on one node
  while the job needs a whole other one).

Such a job is set aside and the round is decided again without it: it preempts nothing, and
holds no capacity away from work that can be placed, so its tenant's later jobs and everyone
else's start where there is room (backfill). The first of them, in the rules' order, that asks
whole GPUs its tenant's guarantee covers gets a reservation (`gpuplex.core.jobs.reservation`):
the GPUs where it can start earliest, from when. The jobs the rules put ahead of it keep the
places they got. While it waits:

- its ask counts as held in every queue above it, so the work that backfills cannot take the
  quota it will start with (not in the cluster's total: the planner keeps its GPUs);
- its reserved GPUs that are free now take only work sure to have left them when it starts (a
  max runtime that ends, with the grace period, by then); anything else goes elsewhere, or
  waits.

A job that waits for capacity (the rules admit nothing more) gets one only when it is known when
that frees, every job it waits for having a max runtime; otherwise the queue rules hold capacity
for it as before. A job asking more than its tenant's guarantee gets no reservation, as it claims nothing in the
queue rules: it may wait while smaller jobs pass it, as in Kueue. Jobs asking MIG slices or
shares get none either: they are small, and the planner finds them room as work leaves. One
reservation at a time: once its job starts, the next job no node can take gets one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplex.core.jobs.live import with_jobs, without_workloads
from gpuplex.core.jobs.placement import JobPlacements, job_workload_name, place_jobs
from gpuplex.core.jobs.reservation import (
    HeldGpus,
    JobReservation,
    ends_by_s,
    find_reservation,
    holders,
)
from gpuplex.core.plan import Plan
from gpuplex.core.plan.model import Placement
from gpuplex.core.queues.admission import AdmissionDecision, Holding, QueuedJob, admit
from gpuplex.core.queues.drf import EPSILON, Resources, add
from gpuplex.core.queues.tree import QueueTree
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.jobs import JobSpec

#: Rounds one step decides at most: each sets aside at least one job no node can take.
_ROUNDS = 8


@dataclass(frozen=True, slots=True)
class Starts:
    """A step's admission and placement: the last round's decision (its evictions and reasons
    are the step's), the live plan with the placed jobs, where each went, why the others wait
    beyond the decision's reasons, and the reservation, if any."""

    decision: AdmissionDecision
    plan: Plan
    placed: Mapping[str, Placement]
    waiting: Mapping[str, str]
    reservation: JobReservation | None


@dataclass(frozen=True, slots=True)
class StepView:
    """What a step admits and places against: the spec and queue tree, what holds capacity
    (`holdings` for the queue rules; `held`, the jobs among them, for the planner), the live
    plan they make, each job's grace period and file, and the clock."""

    spec: GpuplexSpec
    tree: QueueTree
    holdings: Sequence[Holding]
    held: Sequence[HeldGpus]
    occupied: Plan
    grace_s: Mapping[str, float]
    files: Mapping[str, JobSpec]
    now_s: float


def admit_and_place(
    view: StepView, queued: Sequence[QueuedJob], usage: Mapping[str, Resources] | None
) -> Starts:
    """Admit and place `queued` (see the module docstring)."""
    return _Step(view, usage, queued).run()


class _Step:
    """One step's rounds. What holds capacity grows as jobs are committed: the jobs the rules
    put ahead of the reserved one keep the places they got in the round it was found."""

    def __init__(
        self,
        view: StepView,
        usage: Mapping[str, Resources] | None,
        queued: Sequence[QueuedJob],
    ) -> None:
        self.view = view
        self.usage = usage
        self.queued = {q.id: q for q in queued}
        self.holdings = list(view.holdings)
        self.held = list(view.held)
        self.occupied = view.occupied
        self.committed: dict[str, Placement] = {}
        self.reservation: JobReservation | None = None
        self.free_now: list[int] = []  # the reserved GPUs nothing holds now

    @property
    def reserved_ask(self) -> QueuedJob | None:
        """The queued job the reservation is for, if any."""
        return None if self.reservation is None else self.queued[self.reservation.job_id]

    def run(self) -> Starts:
        view = self.view
        set_aside: dict[str, str] = {}
        decision = AdmissionDecision((), ())
        placing = JobPlacements(self.occupied, {}, {})
        for _ in range(_ROUNDS):
            left = [
                q
                for q in self.queued.values()
                if q.id not in set_aside and q.id not in self.committed
            ]
            decision = admit(*self._round(left), view.now_s, usage=self.usage)
            useless = self._useless_evictions(decision)
            set_aside.update(useless)
            placing = JobPlacements(self.occupied, {}, {})
            if decision.admitted:
                placing = self._place({j: view.files[j] for j in decision.admitted})
            set_aside.update(placing.waiting)
            # the first job in the rules' order that cannot start may get the reservation (a job
            # that waits for capacity only with a known start); then the round is decided again
            # around it, without the jobs set aside and their preemptions
            candidates = {
                **dict.fromkeys(decision.short, True),
                **dict.fromkeys([*useless, *placing.waiting], False),
            }
            reserved = self._reserve(decision.order, candidates, placing.placed)
            if not useless and not placing.waiting and not reserved:
                break
        else:  # out of rounds: what the last one placed may not respect its reservation
            placing = JobPlacements(self.occupied, {}, {})
            why = "not decided in this pass (too many rounds): the next pass decides it"
            set_aside.update(dict.fromkeys(decision.admitted, why))
        waiting = dict(set_aside)
        if self.reservation is not None:
            why = self.reservation.words(view.now_s)
            waiting[self.reservation.job_id] = f"no node has room for it now: {why}"
        placed = {**self.committed, **placing.placed}
        return Starts(decision, placing.plan, placed, waiting, self.reservation)

    def _round(
        self, queued: Sequence[QueuedJob]
    ) -> tuple[QueueTree, list[Holding], list[QueuedJob]]:
        """What the queue rules decide over: with a reservation, its job holds its ask in every
        queue above it, but not in the cluster's total (the planner keeps its GPUs)."""
        view = self.view
        ask = self.reserved_ask
        if ask is None:
            return view.tree, list(self.holdings), list(queued)
        holding = Holding(ask.id, ask.tenant, ask.ask, ask.priority, view.now_s, preemptible=False)
        tree = QueueTree.of(view.tree.root, add(view.tree.capacity, ask.ask), view.tree.half_life_s)
        return tree, [*self.holdings, holding], [q for q in queued if q.id != ask.id]

    def _reserve(
        self,
        order: Sequence[str],
        candidates: Mapping[str, bool],
        placed: Mapping[str, Placement],
    ) -> bool:
        """Make the reservation, when there is none yet, for the first job in `order` among
        the `candidates` (each: whether it needs a start known now) that asks whole GPUs its
        tenant's guarantee covers, if any has room once jobs end; the jobs ahead of it that
        were `placed` keep their places. Whether it made one."""
        view = self.view
        if self.reservation is not None:
            return False
        queued = self.queued
        for n, job_id in enumerate(order):
            job = queued[job_id]
            if job_id not in candidates or view.files[job_id].gpu.count is None:
                continue
            if not _covered(view.tree, job):
                continue
            ahead = {j: placed[j] for j in order[:n] if j in placed}
            held = self.held + [
                HeldGpus(j, view.files[j], p, self._ends_by(j)) for j, p in ahead.items()
            ]
            occupied = with_jobs(self.occupied, list(ahead.values()))
            found = find_reservation(
                view.spec, occupied, held, job_id, view.files[job_id], view.grace_s
            )
            if found is None or (candidates[job_id] and found.start_s is None):
                continue
            self.committed, self.held, self.occupied = ahead, held, occupied
            self.holdings += [
                Holding(j, queued[j].tenant, queued[j].ask, queued[j].priority, view.now_s, False)
                for j in ahead
            ]
            taken = {(p.node, i) for p in occupied.placements for i in p.gpu_indices}
            self.free_now = [
                i for i in found.placement.gpu_indices if (found.placement.node, i) not in taken
            ]
            self.reservation = found
            return True
        return False

    def _useless_evictions(self, decision: AdmissionDecision) -> dict[str, str]:
        """The jobs the round preempts for that no node would have room for even once their
        victims, and the work already being stopped, have stopped (the rules count amounts, not
        nodes): per job, why it waits. Their victims run on; they wait as jobs no node can
        take."""
        view = self.view
        victims: dict[str, list[str]] = {}
        for eviction in decision.evictions:
            victims.setdefault(eviction.for_job, []).append(eviction.victim)
        useless: dict[str, str] = {}
        leaving = {h.job_id for h in self.held if h.leaving}
        for job_id, mine in victims.items():
            gone = {*mine, *leaving}
            running = {h.job_id: h.job for h in self.held if h.job_id not in gone}
            plan = without_workloads(self.occupied, {job_workload_name(j) for j in gone})
            trial = place_jobs(view.spec, plan, running, {job_id: view.files[job_id]}, view.grace_s)
            if job_id not in trial.placed:
                names = ", ".join(sorted(mine))
                useless[job_id] = (
                    f"no GPU has room for it now, nor would once {names} stopped: "
                    "it preempts nothing"
                )
        return useless

    def _ends_by(self, job_id: str) -> float | None:
        view = self.view
        return ends_by_s(view.files[job_id], view.now_s, view.grace_s.get(job_id, 0.0))

    def _place(self, starting: Mapping[str, JobSpec]) -> JobPlacements:
        """Place `starting`; with a reservation, only work sure to leave its free GPUs before it
        starts may use them."""
        view = self.view
        running = {h.job_id: h.job for h in self.held}
        reservation = self.reservation
        if reservation is None or not self.free_now:
            return place_jobs(view.spec, self.occupied, running, starting, view.grace_s)
        brief = {j: s for j, s in starting.items() if reservation.allows(self._ends_by(j))}
        others = {j: s for j, s in starting.items() if j not in brief}
        stand_ins = holders(reservation, self.free_now)
        fenced = with_jobs(self.occupied, [p for _, p in stand_ins.values()])
        grace = {**view.grace_s, **dict.fromkeys(stand_ins, 0.0)}
        first = place_jobs(
            view.spec,
            fenced,
            {**running, **{h: s for h, (s, _) in stand_ins.items()}},
            others,
            grace,
        )
        after = without_workloads(first.plan, {p.workload for _, p in stand_ins.values()})
        placed_first = {j: others[j] for j in first.placed}
        second = place_jobs(view.spec, after, {**running, **placed_first}, brief, view.grace_s)
        return JobPlacements(
            second.plan,
            {**first.placed, **second.placed},
            {**first.waiting, **second.waiting},
        )


def _covered(tree: QueueTree, job: QueuedJob) -> bool:
    """Does the job's tenant's guarantee cover its ask (it may take that much without
    borrowing, once its own work has left)?"""
    path = tree.paths.get(job.tenant)
    if path is None:
        return False
    guarantee = path[-1].guarantee
    return all(v <= guarantee.get(k, 0.0) + EPSILON for k, v in job.ask.items())
