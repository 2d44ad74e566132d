"""Replay a cluster trace in time through the admission rules: pods arrive, wait, start, leave.

Event-driven: each pod arrives at its creation time (divided by `speedup`, which packs the same
pods into less time) and, once started, runs for its trace runtime (deletion - creation), then
leaves; a pod without a deletion time runs to the end. At each instant with arrivals or
departures (departures first), one admission round (`admit_ordered`) runs over the queues kept
in `queue_order`; each admitted pod is placed with the placement policy on the cluster. A pod the
queues admit but no node can take stays queued ("no node has room") and does not run; the round's
other admissions go on, and the round runs again without it for the rest of that instant, so the
capacity the rules counted for it goes to pods that can be placed; so is a pod whose preemptions
would not give it a node (its victims run on). As the job runner's step does
(`gpuplex.core.jobs.backfill`), without reservations; FIFO stays strict: its head blocks the
line. Evictions are applied at once (a grace period of 0): the preempted pod
leaves its node, goes back to its queue with its first arrival time, and later starts its whole
runtime again; the round then runs again so the pod it was preempted for can start. Each tenant's
decayed usage (fair share over time, with the tree's half-life) is kept step by step: between two
instants every tenant held what its running pods hold (`gpuplex.core.queues.usage.decayed_since`).

A pod asks num_gpu x gpu_milli / 1000 GPUs of the `gpus` kind (a share of a GPU counts as that
fraction of a GPU); the capacity is the cluster's GPU count. FIFO is the same engine with one
queue that holds every pod in arrival order and no quotas (one tenant owning the whole cluster):
strict arrival order, no preemption. Pure apart from the policy's random tie-breaks (seeded).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuplex.core.fragmentation.model import MILLI
from gpuplex.core.queues.admission import (
    Holding,
    JobEviction,
    QueuedJob,
    admit_ordered,
    queue_order,
)
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.queues.usage import decayed_since
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.core.trace import Choice, ClusterState, TraceNode, choose, policy_named
from gpuplex.replay.openb import TimedPod

FIFO_QUEUE = "fifo"
NO_ROOM = "no node has room"
#: admission rounds at one instant, at most (a round after evictions lets their claimant start;
#: one after pods no node had room for gives their room to others)
_ROUNDS_PER_INSTANT = 4
#: samples over the drain after the last arrival too, but at most this many times `samples`
_SAMPLES_MOST = 5


@dataclass(slots=True)
class PodRecord:
    """One pod's fate: when it arrived, first started and left (None: never), preemptions."""

    name: str
    tenant: str
    gpus: float
    arrival_s: float
    start_s: float | None = None
    end_s: float | None = None
    preemptions: int = 0

    @property
    def delay_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.arrival_s


@dataclass(frozen=True, slots=True)
class Sample:
    """Per tenant at one time: GPUs allocated (running pods) and GPUs asked (running + queued)."""

    time_s: float
    allocated: dict[str, float]
    demand: dict[str, float]


@dataclass(slots=True)
class JobsReplay:
    """One run: the rules ("queues" or "fifo"), the placement policy, per pod and over time."""

    rules: str
    policy: str
    capacity_gpus: float
    records: list[PodRecord]
    samples: list[Sample] = field(default_factory=list)
    rounds: int = 0
    no_room: int = 0  # admissions that no node could take


def fifo_tree(capacity_gpus: float) -> QueueTree:
    """One queue owning the whole cluster: admission in arrival order, nothing preempted."""
    capacity = {GPUS: capacity_gpus}
    fifo = QueueNode(FIFO_QUEUE, "tenant", guarantee=capacity)
    root = QueueNode("cluster", "cluster", capacity, capacity, children=(fifo,))
    return QueueTree.of(root, capacity)


def replay_jobs(
    nodes: Sequence[TraceNode],
    pods: Sequence[TimedPod],
    tenants: Sequence[str],
    *,
    tree: QueueTree | None,
    policy: str,
    seed: int,
    speedup: float = 1.0,
    samples: int = 400,
) -> JobsReplay:
    """Replay `pods` (pod i belongs to `tenants[i]`) under the queue rules of `tree`, or FIFO
    when `tree` is None, placing with `policy`. Samples on a grid of `samples` steps over the
    arrivals, from the first arrival until the last pod has arrived and none waits (at most
    5 x `samples`): means over them are means over that time."""
    return _Loop(nodes, pods, tenants, tree, policy, seed, speedup, samples).run()


class _Loop:
    def __init__(
        self,
        nodes: Sequence[TraceNode],
        pods: Sequence[TimedPod],
        tenants: Sequence[str],
        tree: QueueTree | None,
        policy: str,
        seed: int,
        speedup: float,
        samples: int,
    ) -> None:
        self.state = ClusterState.empty(tuple(nodes))
        capacity = self.state.capacity_milli / MILLI
        self.tree = tree if tree is not None else fifo_tree(capacity)
        self.tree = QueueTree.of(
            self.tree.root, {**self.tree.capacity, GPUS: capacity}, self.tree.half_life_s
        )
        self.fifo = tree is None
        self.pods = pods
        self.tenants = tenants
        self.policy = policy_named(policy, [p.pod for p in pods], pods_leave=True)
        self.rng = np.random.default_rng(seed)
        self.result = JobsReplay(
            "fifo" if self.fifo else "queues",
            policy,
            capacity,
            [
                PodRecord(p.pod.name, t, p.pod.total_gpu_milli / MILLI, p.arrival_s / speedup)
                for p, t in zip(pods, tenants, strict=True)
            ],
        )
        self.events: list[tuple[float, int, int, int]] = []  # (time, 0 leave / 1 arrive, pod, run)
        for i, record in enumerate(self.result.records):
            self.events.append((record.arrival_s, 1, i, 0))
        heapq.heapify(self.events)
        self.queues: dict[str, list[QueuedJob]] = {}
        self.queued: dict[str, int] = {}  # job id -> pod index
        self.set_aside: set[str] = set()  # admitted at this instant, but no node had room
        self.running: dict[int, Choice] = {}  # pod -> where it runs
        self.holdings: dict[int, Holding] = {}  # pod -> what it holds, for the admission rounds
        self.runs = [0] * len(pods)  # per pod: how many times it started (stale leaves ignored)
        self.allocated: dict[str, float] = {}
        self.demand: dict[str, float] = {}
        self.held: dict[str, dict[str, float]] = {}  # per queue: what its running pods hold
        self.usage: dict[str, dict[str, float]] = {}  # per queue: decayed past usage
        times = [r.arrival_s for r in self.result.records]
        self.usage_at = min(times, default=0.0)
        span = max(times) - min(times) if times else 0.0
        self.step = span / max(samples, 1) if span > 0 else 1.0
        self.next_sample = min(times, default=0.0)
        self.samples_left = _SAMPLES_MOST * max(samples, 1)
        self.to_arrive = len(pods)

    def queue_of(self, pod: int) -> str:
        return FIFO_QUEUE if self.fifo else self.tenants[pod]

    def run(self) -> JobsReplay:
        while self.events:
            now = self.events[0][0]
            self._sample_until(now)
            self.usage = decayed_since(
                self.usage, self.held, now - self.usage_at, self.tree.half_life_s
            )
            self.usage_at = now
            self.set_aside.clear()  # a new instant: every queued pod is tried again
            while self.events and self.events[0][0] == now:
                _, kind, pod, run = heapq.heappop(self.events)
                if kind == 1:
                    self.to_arrive -= 1
                    self._enqueue(pod)
                elif self.runs[pod] == run and pod in self.running:
                    self._leave(pod, now)
            for _ in range(_ROUNDS_PER_INSTANT):
                if not self._round(now):
                    break
        return self.result

    def _enqueue(self, pod: int) -> None:
        record = self.result.records[pod]
        self._enqueue_again(pod)
        self.demand[record.tenant] = self.demand.get(record.tenant, 0.0) + record.gpus

    def _leave(self, pod: int, now: float, *, done: bool = True) -> None:
        choice = self.running.pop(pod)
        del self.holdings[pod]
        self.state.remove(choice.node, self.pods[pod].pod, choice.gpus)
        record = self.result.records[pod]
        self.allocated[record.tenant] -= record.gpus
        self._hold(self.queue_of(pod), -record.gpus)
        if done:
            record.end_s = now
            self.demand[record.tenant] -= record.gpus

    def _round(self, now: float) -> bool:
        """One admission round; True when it preempted, or set aside a pod no node had room
        for (another round may start more)."""
        if len(self.queued) <= len(self.set_aside):
            return False
        self.result.rounds += 1
        holdings = list(self.holdings.values())
        queues = self.queues
        if self.set_aside:
            queues = {t: [j for j in q if j.id not in self.set_aside] for t, q in queues.items()}
        decision = admit_ordered(self.tree, holdings, queues, now, usage=self.usage)
        evictions = self._helpful(decision.evictions)
        no_room = len(evictions) < len(decision.evictions)
        started: set[str] = set()
        for job_id in decision.admitted:
            pod = self.queued[job_id]
            choice = choose(self.state, self.pods[pod].pod, self.policy, self.rng)
            if choice is None:
                self.result.no_room += 1
                if not self.fifo:  # FIFO stays strict: its head blocks the line
                    self.set_aside.add(job_id)
                    no_room = True
                continue
            self._start(pod, choice, now)
            started.add(job_id)
        for eviction in evictions:
            pod = int(eviction.victim)
            self._leave(pod, now, done=False)
            self.result.records[pod].preemptions += 1
            self._enqueue_again(pod)
        if started:
            for tenant in {self.queue_of(self.queued[j]) for j in started}:
                self.queues[tenant] = [j for j in self.queues[tenant] if j.id not in started]
            for job_id in started:
                del self.queued[job_id]
        return bool(evictions) or no_room

    def _helpful(self, evictions: Sequence[JobEviction]) -> list[JobEviction]:
        """The evictions whose pod would find a node once its victims left: the rules count
        amounts, not nodes. A pod they would not help is set aside for this instant, and its
        victims run on (as the job runner does, `gpuplex.core.jobs.backfill`)."""
        by_claimant: dict[str, list[JobEviction]] = {}
        for eviction in evictions:
            by_claimant.setdefault(eviction.for_job, []).append(eviction)
        kept: list[JobEviction] = []
        for claimant, mine in by_claimant.items():
            victims = [int(e.victim) for e in mine]
            for pod in victims:
                choice = self.running[pod]
                self.state.remove(choice.node, self.pods[pod].pod, choice.gpus)
            helps = bool(self.state.feasible(self.pods[self.queued[claimant]].pod).any())
            for pod in victims:
                choice = self.running[pod]
                self.state.place(choice.node, self.pods[pod].pod, choice.gpus)
            if helps:
                kept += mine
            else:
                self.set_aside.add(claimant)
        return kept

    def _start(self, pod: int, choice: Choice, now: float) -> None:
        self.state.place(choice.node, self.pods[pod].pod, choice.gpus)
        record = self.result.records[pod]
        if record.start_s is None:
            record.start_s = now
        self.running[pod] = choice
        self.holdings[pod] = Holding(str(pod), self.queue_of(pod), {GPUS: record.gpus}, 0, now)
        self.runs[pod] += 1
        self.allocated[record.tenant] = self.allocated.get(record.tenant, 0.0) + record.gpus
        self._hold(self.queue_of(pod), record.gpus)
        runtime = self.pods[pod].runtime_s
        if runtime is not None:
            heapq.heappush(self.events, (now + runtime, 0, pod, self.runs[pod]))

    def _hold(self, queue: str, gpus: float) -> None:
        mine = self.held.setdefault(queue, {})
        mine[GPUS] = max(0.0, mine.get(GPUS, 0.0) + gpus)

    def _enqueue_again(self, pod: int) -> None:
        """A preempted pod back in its queue with its first arrival time (its demand stays)."""
        record = self.result.records[pod]
        job = QueuedJob(str(pod), self.queue_of(pod), {GPUS: record.gpus}, 0, record.arrival_s)
        bisect.insort(self.queues.setdefault(job.tenant, []), job, key=queue_order)
        self.queued[job.id] = pod

    def _sample_until(self, now: float) -> None:
        """Sample at each grid time before `now` (the state since the last instant holds there),
        while pods are still to arrive or wait in a queue."""
        while self.next_sample < now and self.samples_left and (self.to_arrive or self.queued):
            self._sample(self.next_sample)
            self.next_sample += self.step
            self.samples_left -= 1

    def _sample(self, at: float) -> None:
        self.result.samples.append(
            Sample(
                at,
                {t: max(v, 0.0) for t, v in self.allocated.items()},
                {t: max(v, 0.0) for t, v in self.demand.items()},
            )
        )
