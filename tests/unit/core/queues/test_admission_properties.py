"""Properties of the admission rules over random queue trees and job streams: no queue passes its
limit, nobody uses a non-lender's idle guarantee, a claim inside a guarantee is met by reclaim
within one round of its victims stopping, preemption sets are minimal, and with equal priorities
every job that could ever run does run (bounded wait in the model)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hypothesis import given, settings, strategies as st

from gpuplex.core.queues.admission import (
    AdmissionDecision,
    Holding,
    QueuedJob,
    admit,
)
from gpuplex.core.queues.drf import Resources, add, fits, subtract
from gpuplex.core.queues.tree import PreemptionRules, QueueNode, QueueTree
from gpuplex.core.spec.quota_kinds import GPUS

MIG = "mig:1g.10gb"
KINDS = (GPUS, MIG)


@st.composite
def trees(draw: st.DrawFn, *, all_lend: bool = False) -> QueueTree:
    """Two organisations of one or two teams of one to three tenants; guarantees that fit inside
    their parents'; some limits, some non-lenders, some non-borrowers."""
    capacity = {GPUS: float(draw(st.integers(4, 16))), MIG: float(draw(st.integers(0, 14)))}
    tenant_no = iter(range(100))

    def node(level: str, budget: Resources, children: tuple[QueueNode, ...] = ()) -> QueueNode:
        guarantee = {k: float(draw(st.integers(0, int(budget[k])))) for k in KINDS}
        limit = None
        if draw(st.booleans()):
            named = draw(st.sampled_from([KINDS, (GPUS,), (MIG,)]))  # a limit binds only these
            limit = {k: guarantee[k] + draw(st.integers(0, 6)) for k in named}
        name = f"t{next(tenant_no)}" if level == "tenant" else f"{level[0]}{next(tenant_no)}"
        return QueueNode(
            name=name,
            level=level,
            guarantee=guarantee,
            limit=limit,
            weight=float(draw(st.integers(1, 3))),
            lends=all_lend or draw(st.booleans()) or level != "tenant",
            borrows=draw(st.booleans()) or level != "tenant",
            preemption=PreemptionRules(min_runtime_s=float(draw(st.sampled_from([0, 10])))),
            children=children,
        )

    orgs = []
    left = dict(capacity)
    for _ in range(2):
        org = node("organisation", left)
        left = subtract(left, org.guarantee)
        teams = []
        team_left = dict(org.guarantee)
        for _ in range(draw(st.integers(1, 2))):
            team = node("team", team_left)
            team_left = subtract(team_left, team.guarantee)
            leaves = []
            leaf_left = dict(team.guarantee)
            for _ in range(draw(st.integers(1, 3))):
                leaf = node("tenant", leaf_left)
                leaf_left = subtract(leaf_left, leaf.guarantee)
                leaves.append(leaf)
            teams.append(replace(team, children=tuple(leaves)))
        orgs.append(replace(org, children=tuple(teams)))
    root = QueueNode("cluster", "cluster", capacity, capacity, children=tuple(orgs))
    return QueueTree.of(root, capacity)


def jobs_for(
    tree: QueueTree, draw: Callable[[st.SearchStrategy[Any]], Any], count: int, start: int = 0
) -> list[QueuedJob]:
    tenants = tree.tenant_names()
    out = []
    for i in range(count):
        kind = draw(st.sampled_from(KINDS))
        out.append(
            QueuedJob(
                id=f"j{start + i}",
                tenant=draw(st.sampled_from(tenants)),
                ask={kind: float(draw(st.integers(1, 3)))},
                priority=draw(st.integers(0, 2)),
                submitted_s=float(start + i),
            )
        )
    return out


def usage(tree: QueueTree, holdings: list[Holding]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {q.name: {} for q in tree.root.walk()}
    for h in holdings:
        for q in tree.paths[h.tenant]:
            out[q.name] = add(out[q.name], h.resources)
    return out


def after(
    decision: AdmissionDecision, holdings: list[Holding], queued: list[QueuedJob]
) -> list[Holding]:
    started = {j.id: j for j in queued if j.id in decision.admitted}
    return holdings + [Holding(j.id, j.tenant, j.ask, j.priority) for j in started.values()]


def starts_beside(tree: QueueTree, holdings: list[Holding], job: QueuedJob) -> bool:
    """Whether `job` fits the free capacity and its queues' limits beside `holdings`."""
    free = subtract(tree.capacity, usage(tree, holdings)[tree.root.name])
    with_it = [*holdings, Holding(job.id, job.tenant, job.ask)]
    return fits(job.ask, free) and within_limits(tree, with_it)


def within_limits(tree: QueueTree, holdings: list[Holding]) -> bool:
    used = usage(tree, holdings)
    for q in tree.root.walk():
        named = {k: v for k, v in used[q.name].items() if q.limit is not None and k in q.limit}
        if q.limit is not None and not fits(named, q.limit):
            return False
        if not q.borrows and not fits(used[q.name], q.guarantee):
            return False
    return True


def lenders_respected(tree: QueueTree, holdings: list[Holding]) -> bool:
    """Outside each non-lending queue, usage leaves its idle guarantee alone."""
    used = usage(tree, holdings)
    for q in tree.root.walk():
        if q.lends or q is tree.root:
            continue
        outside = subtract(used[tree.root.name], used[q.name])
        kept = {k: max(g, used[q.name].get(k, 0.0)) for k, g in q.guarantee.items()}
        if not fits(outside, subtract(tree.capacity, kept)):
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_no_queue_passes_its_limit_and_nobody_takes_a_non_lenders_idle_guarantee(
    data: st.DataObject,
) -> None:
    tree = data.draw(trees())
    queued = jobs_for(tree, data.draw, data.draw(st.integers(1, 30)))
    decision = admit(tree, [], queued, now_s=100.0)
    running = after(decision, [], queued)
    assert within_limits(tree, running)
    assert lenders_respected(tree, running)
    assert fits(usage(tree, running)[tree.root.name], tree.capacity)
    assert set(decision.admitted) | set(decision.waiting) == {j.id for j in queued}


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_preemption_sets_are_minimal_and_take_only_borrowed_or_lower_priority_work(
    data: st.DataObject,
) -> None:
    tree = data.draw(trees(all_lend=True))
    first = jobs_for(tree, data.draw, data.draw(st.integers(5, 30)))
    running = after(admit(tree, [], first, now_s=0.0), [], first)
    job = replace(jobs_for(tree, data.draw, 1, start=100)[0], priority=3)
    decision = admit(tree, running, [job], now_s=1000.0)
    victims = [h for h in running if h.id in {e.victim for e in decision.evictions}]
    used = usage(tree, running)
    for victim in victims:
        own = tree.paths[victim.tenant][-1]
        borrowed = not fits(used[victim.tenant], own.guarantee)
        mine_lower = victim.tenant == job.tenant and victim.priority < job.priority
        assert borrowed or mine_lower
    # minimal: with the victims gone the job fits (capacity and its queues' limits); with any
    # one of them spared, it would not
    rest = [h for h in running if h not in victims]
    assert not victims or starts_beside(tree, rest, job)
    for spared in victims:
        assert not starts_beside(tree, [*rest, spared], job)


def relaxed(node: QueueNode) -> QueueNode:
    """The same tree with no limits, every queue lending and borrowing."""
    children = tuple(relaxed(c) for c in node.children)
    if node.level == "cluster":
        return replace(node, children=children)
    return replace(node, limit=None, lends=True, borrows=True, children=children)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_claim_inside_the_guarantee_preempts_and_then_starts(data: st.DataObject) -> None:
    drawn = data.draw(trees())
    tree = QueueTree.of(relaxed(drawn.root), drawn.capacity)
    tenants = [t for t in tree.root.tenants() if t.guarantee.get(GPUS, 0.0) >= 1]
    claimant = data.draw(st.sampled_from(tenants)) if tenants else None
    others = [t for t in tree.root.tenants() if claimant is None or t.name != claimant.name]
    if claimant is None or not others:
        return
    # the others fill the cluster with one-GPU jobs
    flood = [
        QueuedJob(f"f{i}", others[i % len(others)].name, {GPUS: 1.0}, submitted_s=float(i))
        for i in range(int(tree.capacity[GPUS]))
    ]
    running = after(admit(tree, [], flood, now_s=0.0), [], flood)
    assert len(running) == len(flood)  # nothing stops them: the cluster is full
    claim = QueuedJob("claim", claimant.name, {GPUS: 1.0}, priority=0, submitted_s=500.0)
    decision = admit(tree, running, [claim], now_s=1000.0)
    assert decision.admitted == ()
    assert len(decision.evictions) == 1  # one GPU asked, one one-GPU job preempted
    victim = next(h for h in running if h.id == decision.evictions[0].victim)
    assert victim.tenant != claimant.name
    assert decision.waiting["claim"] == f"preempting {victim.id} for it; it starts when they stop"
    # the victim stops (after its grace period): the next round starts the claim
    rest = [h for h in running if h is not victim]
    assert admit(tree, rest, [claim], now_s=1030.0).admitted == ("claim",)
    # while it is still stopping, nothing more is preempted for the claim
    stopping = [*rest, replace(victim, stopping_for="claim")]
    again = admit(tree, stopping, [claim], now_s=1010.0)
    assert again.evictions == ()
    assert again.admitted == ()


@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_with_equal_priorities_every_job_that_can_run_does(data: st.DataObject) -> None:
    """Jobs run for a few rounds each; preempted ones go back to the queue. Every job whose ask
    fits its tenant's quotas and the cluster finishes within a bounded number of rounds."""
    tree = data.draw(trees())
    queued = [replace(j, priority=0) for j in jobs_for(tree, data.draw, 25)]
    runtime = {j.id: data.draw(st.integers(1, 4)) for j in queued}
    possible = {j.id for j in queued if _could_ever_run(tree, j)}
    running: list[Holding] = []
    started_at: dict[str, int] = {}
    finished: set[str] = set()
    waiting = list(queued)
    for step in range(400):
        decision = admit(tree, running, waiting, now_s=float(step * 100))
        stopped = {e.victim for e in decision.evictions}
        for job in [j for j in queued if j.id in stopped]:
            waiting.append(job)  # requeued, keeping its place in the order
        running = [h for h in running if h.id not in stopped]
        for job in [j for j in waiting if j.id in decision.admitted]:
            running.append(Holding(job.id, job.tenant, job.ask, 0, started_s=float(step * 100)))
            started_at[job.id] = step
        waiting = [j for j in waiting if j.id not in decision.admitted]
        done = {h.id for h in running if step - started_at[h.id] + 1 >= runtime[h.id]}
        finished |= done
        running = [h for h in running if h.id not in done]
        if possible <= finished:
            break
    assert possible <= finished, sorted(possible - finished)


def _could_ever_run(tree: QueueTree, job: QueuedJob) -> bool:
    """Alone in the cluster, the job is admitted."""
    return admit(tree, [], [job], now_s=0.0).admitted == (job.id,)


def test_a_job_waits_behind_its_own_queues_first_unless_it_can_never_start() -> None:
    leaf = QueueNode("acme", "tenant", {GPUS: 2.0}, {GPUS: 3.0})
    root = QueueNode("cluster", "cluster", {GPUS: 8.0}, {GPUS: 8.0}, children=(leaf,))
    tree = QueueTree.of(root, {GPUS: 8.0})
    running = [Holding("r1", "acme", {GPUS: 2.0}, started_s=0.0)]
    huge = QueuedJob("huge", "acme", {GPUS: 4.0}, submitted_s=1.0)
    big = QueuedJob("big", "acme", {GPUS: 2.0}, submitted_s=2.0)
    small = QueuedJob("small", "acme", {GPUS: 1.0}, submitted_s=3.0)
    decision = admit(tree, running, [small, big, huge], now_s=10.0)
    assert decision.admitted == ()
    assert decision.waiting == {
        "huge": "can never start: it asks more than acme's limit: 4 GPUs asked > 3",
        "big": "acme would pass its limit: 2 GPUs held + 2 asked > 3",
        "small": "behind big, the first of acme's queued jobs",
    }
    # once r1 ends, big starts, and small behind it (the limit allows 3)
    assert admit(tree, [], [small, big, huge], now_s=20.0).admitted == ("big", "small")
