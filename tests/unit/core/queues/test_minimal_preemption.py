"""Minimal preemption: a round's victims are chosen against the capacity earlier victims free, so
no smaller set of them would serve the claims the round serves (brute force over every subset),
and no victim is admitted again once it has stopped (its work would be thrown away)."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from hypothesis import given, settings, strategies as st

from gpuplex.core.queues.admission import AdmissionDecision, Holding, JobEviction, QueuedJob, admit
from gpuplex.core.queues.drf import add, fits
from gpuplex.core.queues.tree import PreemptionRules, QueueNode, QueueTree
from gpuplex.core.spec.quota_kinds import GPUS
from tests.unit.core.queues.test_admission_properties import after, jobs_for, trees, usage

EPS = 1e-9


def serves(
    tree: QueueTree,
    running: list[Holding],
    claims: list[QueuedJob],
    decision: AdmissionDecision,
    gone: set[str],
) -> bool:
    """Whether, with the holdings `gone` stopped and the admitted jobs running, every job the
    round set capacity aside for fits with what was set aside, in the kinds it asks: within the
    capacity, and within every limit (and non-borrower's guarantee) above it, where of the
    stopped work only its own tenant's lower-priority jobs count as gone (the others go back to
    their queues, maybe ahead of it)."""
    started = [Holding(j.id, j.tenant, j.ask) for j in claims if j.id in decision.admitted]
    served = [j for j in claims if j.id in decision.reserved]
    waiting = [Holding(j.id, j.tenant, decision.reserved[j.id]) for j in served]
    root = tree.root.name
    total = usage(tree, [h for h in running if h.id not in gone] + started + waiting)[root]
    for job in served:
        kinds = [k for k, v in job.ask.items() if v > EPS]
        if any(total.get(k, 0.0) > tree.capacity.get(k, 0.0) + EPS for k in kinds):
            return False
        behind = {
            h.id
            for h in running
            if h.id in gone and h.tenant == job.tenant and h.priority < job.priority
        }
        used = usage(tree, [h for h in running if h.id not in behind] + started + waiting)
        for queue in tree.paths[job.tenant][1:]:
            for kind in kinds:
                held = used[queue.name].get(kind, 0.0)
                limit = queue.limit or {}
                if kind in limit and held > limit[kind] + EPS:
                    return False
                if not queue.borrows and held > queue.guarantee.get(kind, 0.0) + EPS:
                    return False
    return True


def check_round(
    tree: QueueTree, first: list[QueuedJob], running: list[Holding], claims: list[QueuedJob]
) -> None:
    """One round of `claims` beside `running` (the admitted ones of `first`): its victims are
    minimal, each serves a claim that says so, and once they stopped none comes back."""
    decision = admit(tree, running, claims, now_s=1000.0)
    victims = {e.victim for e in decision.evictions}
    assert len(decision.evictions) == len(victims)  # each preempted once
    assert victims <= {h.id for h in running}
    assert serves(tree, running, claims, decision, victims)
    for size in range(len(victims)):
        for fewer in combinations(sorted(victims), size):
            assert not serves(tree, running, claims, decision, set(fewer)), (fewer, victims)
    for eviction in decision.evictions:
        assert eviction.for_job in decision.reserved
        assert "preempting" in decision.waiting[eviction.for_job]
    if any(swaps_beyond_guarantee(tree, running, claims, e) for e in decision.evictions):
        return  # what a borrower's own stopped work frees goes by the fair order (docs/quotas.md)
    # the victims stop and are queued again with their places kept; nothing else changes: the
    # capacity they free goes to the claims, never back to a victim
    rest = [h for h in running if h.id not in victims]
    rest += [
        Holding(j.id, j.tenant, j.ask, j.priority, 1000.0)
        for j in claims
        if j.id in decision.admitted
    ]
    again = [j for j in claims if j.id not in decision.admitted]
    again += [j for j in first if j.id in victims]
    later = admit(tree, rest, again, now_s=1030.0)
    assert not victims & set(later.admitted), (victims, later.admitted)


def swaps_beyond_guarantee(
    tree: QueueTree, running: list[Holding], claims: list[QueuedJob], eviction: JobEviction
) -> bool:
    """Whether `eviction` is a job beyond its tenant's guarantee preempting its own tenant's
    lower-priority work."""
    claim = next(j for j in claims if j.id == eviction.for_job)
    victim = next(h for h in running if h.id == eviction.victim)
    if victim.tenant != claim.tenant:
        return False
    held = add(*(h.resources for h in running if h.tenant == claim.tenant))
    guarantee = tree.paths[claim.tenant][-1].guarantee
    return not fits(add(held, claim.ask), guarantee)


@st.composite
def crowded(draw: st.DrawFn) -> tuple[QueueTree, list[QueuedJob], list[Holding], list[QueuedJob]]:
    """Three to five tenants of one team on 3 to 10 GPUs, some guaranteed, some limited; some of
    them fill the cluster with jobs of 1 to 3 GPUs, then 1 to 4 jobs of any of them ask."""
    cap = float(draw(st.integers(3, 10)))
    patience = PreemptionRules(min_runtime_s=float(draw(st.sampled_from([0, 0, 0, 500]))))
    left = cap
    tenants = []
    for i in range(draw(st.integers(3, 5))):
        guarantee = float(draw(st.integers(0, int(left))))
        left -= guarantee
        limit = (
            {GPUS: guarantee + draw(st.integers(1, 4))} if draw(st.integers(0, 3)) == 0 else None
        )
        weight = float(draw(st.integers(1, 3)))
        tenants.append(
            QueueNode(f"t{i}", "tenant", {GPUS: guarantee}, limit, weight, preemption=patience)
        )
    capacity = {GPUS: cap}
    team = QueueNode("team", "team", children=tuple(tenants))
    tree = QueueTree.of(
        QueueNode("cluster", "cluster", capacity, capacity, children=(team,)), capacity
    )
    names = [t.name for t in tenants]
    fillers = draw(st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True))
    first = [
        QueuedJob(
            f"r{i}",
            draw(st.sampled_from(fillers)),
            {GPUS: float(draw(st.integers(1, 3)))},
            draw(st.integers(0, 2)),
            float(i),
        )
        for i in range(12)
    ]
    admitted = set(admit(tree, [], first, now_s=0.0).admitted)
    running = [
        Holding(j.id, j.tenant, j.ask, j.priority, float(i))  # the later, the younger
        for i, j in enumerate(first)
        if j.id in admitted
    ]
    owners = draw(st.lists(st.sampled_from(names), min_size=1, max_size=4))
    claims = [
        QueuedJob(
            f"c{i}",
            owner,
            {GPUS: float(draw(st.integers(1, 2)))},
            draw(st.integers(0, 3)),
            100.0 + i,
        )
        for i, owner in enumerate(owners)
    ]
    return tree, first, running, claims


@settings(max_examples=400, deadline=None)
@given(state=crowded())
def test_no_smaller_victim_set_serves_the_rounds_claims_in_a_crowded_cluster(
    state: tuple[QueueTree, list[QueuedJob], list[Holding], list[QueuedJob]],
) -> None:
    check_round(*state)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_no_smaller_victim_set_serves_the_rounds_claims_on_any_tree(data: st.DataObject) -> None:
    """Deeper trees, two kinds (whole GPUs and MIG slices), limits and non-borrowers."""
    tree = data.draw(trees(all_lend=True))
    first = jobs_for(tree, data.draw, data.draw(st.integers(3, 16)))
    started = after(admit(tree, [], first, now_s=0.0), [], first)
    running = [replace(h, started_s=float(i)) for i, h in enumerate(started)]
    claims = [
        replace(j, priority=data.draw(st.integers(0, 3)))
        for j in jobs_for(tree, data.draw, data.draw(st.integers(1, 4)), start=100)
    ]
    check_round(tree, first, running, claims)


def three_tenants() -> QueueTree:
    """alpha borrows everything; beta and gamma are guaranteed one GPU each of 4."""
    now = PreemptionRules(min_runtime_s=0.0)
    tenants = (
        QueueNode("alpha", "tenant", {}, preemption=now),
        QueueNode("beta", "tenant", {GPUS: 1.0}, preemption=now),
        QueueNode("gamma", "tenant", {GPUS: 1.0}, preemption=now),
    )
    cap = {GPUS: 4.0}
    return QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=tenants), cap)


def test_two_one_gpu_claims_preempt_two_jobs_not_three() -> None:
    """The reported case: alpha holds 4 GPUs in four jobs, gamma and beta each ask for one."""
    tree = three_tenants()
    running = [Holding(f"a{i}", "alpha", {GPUS: 1.0}, started_s=float(i)) for i in range(4)]
    claims = [
        QueuedJob("g", "gamma", {GPUS: 1.0}, submitted_s=10.0),
        QueuedJob("b", "beta", {GPUS: 1.0}, submitted_s=11.0),
    ]
    decision = admit(tree, running, claims, now_s=100.0)
    assert [(e.victim, e.for_job) for e in decision.evictions] == [("a3", "g"), ("a2", "b")]
    assert decision.admitted == ()
    # while they stop, nothing more is preempted
    stopping = [*running[:2], replace(running[2], stopping_for="b")]
    stopping += [replace(running[3], stopping_for="g")]
    assert admit(tree, stopping, claims, now_s=105.0).evictions == ()
    # once they stopped, the two claims start and alpha's requeued jobs wait
    requeued = [QueuedJob("a2", "alpha", {GPUS: 1.0}), QueuedJob("a3", "alpha", {GPUS: 1.0})]
    later = admit(tree, running[:2], [*claims, *requeued], now_s=130.0)
    assert sorted(later.admitted) == ["b", "g"]
    assert later.evictions == ()


def test_what_a_victim_frees_beyond_its_claim_goes_to_the_next_claim() -> None:
    tree = three_tenants()
    running = [
        Holding("a-big", "alpha", {GPUS: 2.0}, started_s=5.0),
        Holding("a0", "alpha", {GPUS: 1.0}, started_s=0.0),
        Holding("a1", "alpha", {GPUS: 1.0}, started_s=1.0),
    ]
    claims = [
        QueuedJob("g", "gamma", {GPUS: 1.0}, submitted_s=10.0),
        QueuedJob("b", "beta", {GPUS: 1.0}, submitted_s=11.0),
    ]
    decision = admit(tree, running, claims, now_s=100.0)
    # the youngest, a-big, frees two GPUs: enough for both claims
    assert [e.victim for e in decision.evictions] == ["a-big"]
    waits = {decision.waiting["g"], decision.waiting["b"]}
    assert "preempting a-big for it; it starts when they stop" in waits
    assert "waiting for a-big to stop (preempted): what they free is enough for it" in waits
    assert decision.reserved == {"g": {GPUS: 1.0}, "b": {GPUS: 1.0}}


def test_a_later_claims_victim_makes_an_earlier_one_unneeded() -> None:
    """gamma's claim comes first and takes alpha's one-GPU job; beta's own lower-priority
    two-GPU job must go for beta's urgent one (beta's limit), and frees a GPU more than that
    needs: gamma's victim is spared again, and gamma waits for that GPU."""
    now = PreemptionRules(min_runtime_s=0.0)
    tenants = (
        QueueNode("alpha", "tenant", {}, preemption=now),
        QueueNode("beta", "tenant", {GPUS: 2.0}, {GPUS: 2.0}, preemption=now),
        QueueNode("gamma", "tenant", {GPUS: 1.0}, preemption=now),
    )
    cap = {GPUS: 4.0}
    tree = QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=tenants), cap)
    running = [
        Holding("a0", "alpha", {GPUS: 1.0}, started_s=0.0),
        Holding("a1", "alpha", {GPUS: 1.0}, started_s=1.0),
        Holding("b-low", "beta", {GPUS: 2.0}, priority=0, started_s=2.0),
    ]
    claims = [
        QueuedJob("g", "gamma", {GPUS: 1.0}, submitted_s=10.0),
        QueuedJob("urgent", "beta", {GPUS: 1.0}, priority=5, submitted_s=11.0),
    ]
    decision = admit(tree, running, claims, now_s=100.0)
    assert [(e.victim, e.for_job) for e in decision.evictions] == [("b-low", "urgent")]
    assert decision.waiting["g"].startswith("waiting for b-low to stop")
