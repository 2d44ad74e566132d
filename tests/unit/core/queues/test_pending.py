"""Why a workload is pending: one hand-computed case per answer code, and properties."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.queues.drf import Resources, add, fits, subtract
from gpuplex.core.queues.hierarchy import (
    Queue,
    RunningWorkload,
    check_tree,
    reclaim,
    usage_by_tenant,
)
from gpuplex.core.queues.pending import (
    CODES,
    STARTS,
    PendingAnswer,
    PendingWorkload,
    why_pending,
)

CAPACITY = {"gpu": 16, "cpu": 64}
MIN_RUNTIME_S = 300.0


def tree() -> Queue:
    """16 GPUs, 64 CPUs. team-a: guarantee 8 GPUs, limit 10 (a1: guarantee 4, limit 6; a2:
    guarantee 4); team-b: guarantee 6, no limit (b1: guarantee 4; b2: guarantee 2)."""
    team_a = Queue(
        "team-a",
        {"gpu": 8, "cpu": 32},
        limit={"gpu": 10, "cpu": 48},
        children=(
            Queue("a1", {"gpu": 4, "cpu": 16}, limit={"gpu": 6, "cpu": 32}),
            Queue("a2", {"gpu": 4, "cpu": 16}),
        ),
    )
    team_b = Queue(
        "team-b",
        {"gpu": 6, "cpu": 24},
        children=(Queue("b1", {"gpu": 4, "cpu": 16}), Queue("b2", {"gpu": 2, "cpu": 8})),
    )
    return Queue("org", children=(team_a, team_b))


def job(
    name: str, tenant: str, gpu: float, priority: int = 0, running_s: float = 1000
) -> RunningWorkload:
    return RunningWorkload(name, tenant, {"gpu": gpu}, priority, running_s)


def ask(tenant: str, gpu: float, **more: float) -> PendingWorkload:
    return PendingWorkload("new", tenant, {"gpu": gpu, **more})


def answer(
    running: Sequence[RunningWorkload],
    pending: PendingWorkload,
    node_free: Sequence[Resources] | None = None,
) -> PendingAnswer:
    return why_pending(
        tree(), CAPACITY, running, pending, min_runtime_s=MIN_RUNTIME_S, node_free=node_free
    )


def test_the_tree_is_valid() -> None:
    check_tree(tree(), CAPACITY)


@dataclass(frozen=True)
class Case:
    running: tuple[RunningWorkload, ...]
    pending: PendingWorkload
    code: str
    queue: str
    resource: str | None
    used: float | None
    asked: float | None
    bound: float | None
    also: tuple[str, ...] = ()
    node_free: tuple[Resources, ...] | None = None


FULL_B1 = (job("a1-x", "a1", 2), job("b-low", "b1", 2, 0, 500), job("b-mid", "b1", 2, 1, 100))
WAITS = (  # 16 GPUs: b2 holds 8 in one job (guarantee 2), b1 6 (guarantee 4) in young jobs
    job("a1-x", "a1", 2),
    job("b2-big", "b2", 8, 0, 1000),
    job("b-low", "b1", 2, 0, 60),
    job("b-mid", "b1", 2, 1, 200),
    job("b-keep", "b1", 2, 3, 10),
)
CASES = {
    # a1 holds 2 of its guarantee 4 and 14 GPUs are free
    "schedulable": Case(
        (job("a1-x", "a1", 2),), ask("a1", 2), "schedulable", "a1", None, None, None, None
    ),
    # a2 has no limit: 6 GPUs is past its guarantee of 4 but idle capacity is borrowed
    "schedulable_borrowing": Case((), ask("a2", 6), "schedulable", "a2", None, None, None, None),
    # a1's limit is 6: 5 + 2 = 7
    "limit": Case((job("a1-x", "a1", 5),), ask("a1", 2), "limit", "a1", "gpu", 5, 2, 6),
    # team-a's limit is 10: a1 4 + a2 5 + 2 = 11; a2 itself has no limit
    "ancestor_limit": Case(
        (job("a1-x", "a1", 4), job("a2-x", "a2", 5)),
        ask("a2", 2),
        "ancestor_limit",
        "team-a",
        "gpu",
        9,
        2,
        10,
    ),
    # 11 GPUs: past a1's limit of 6 and team-a's of 10, though the cluster has 16
    "both_limits": Case((), ask("a1", 11), "limit", "a1", "gpu", 0, 11, 6, ("ancestor_limit",)),
    # the cluster has 16 GPUs
    "exceeds_capacity": Case((), ask("b1", 17), "exceeds_capacity", "org", "gpu", 0, 17, 16),
    # 8 GPUs free in total, 3 + 3 + 2 on the nodes
    "no_node_fits": Case(
        (job("b1-x", "b1", 8),),
        ask("b2", 4),
        "no_node_fits",
        "org",
        "gpu",
        8,
        4,
        3,
        node_free=({"gpu": 3, "cpu": 20}, {"gpu": 3, "cpu": 20}, {"gpu": 2, "cpu": 24}),
    ),
    # 3 GPUs fit on nodes 1 and 2, 24 CPUs on node 3 only: the first node short of CPUs has 20
    "no_node_fits_both": Case(
        (job("b1-x", "b1", 8),),
        ask("b2", 3, cpu=24),
        "no_node_fits",
        "org",
        "cpu",
        0,
        24,
        20,
        node_free=({"gpu": 3, "cpu": 20}, {"gpu": 3, "cpu": 20}, {"gpu": 2, "cpu": 24}),
    ),
    # full; a1 asks 2 inside its guarantee (2 + 2 <= 4); b1 borrows 10: b-low goes (priority 0)
    "preempts": Case(
        (*FULL_B1, job("b-rest", "b1", 10, 5)), ask("a1", 2), "preempts", "a1", "gpu", 2, 2, 4
    ),
    # full; b2-big cannot go (b2 would drop below its guarantee of 2), b1's jobs are younger
    # than 300 s: b-mid (200 s) is the first whose preemption would be enough
    "reclaim_waits_min_runtime": Case(
        WAITS, ask("a1", 2), "reclaim_waits_min_runtime", "a1", "gpu", 2, 2, 4
    ),
    # full; b1 holds exactly its guarantee, b2 one 10-GPU job above its guarantee of 2
    "reclaim_not_enough": Case(
        (job("a1-x", "a1", 2), job("b1-x", "b1", 4), job("b2-big", "b2", 10)),
        ask("a1", 2),
        "reclaim_not_enough",
        "a1",
        "gpu",
        2,
        2,
        4,
    ),
    # full; a1 would hold 5, past its guarantee of 4; its fair share is 5 (see the test below)
    "no_idle_capacity_to_borrow": Case(
        (job("a1-x", "a1", 4), job("b1-x", "b1", 12)),
        ask("a1", 1),
        "no_idle_capacity_to_borrow",
        "org",
        "gpu",
        16,
        1,
        16,
    ),
    # full; a2 would hold 10 and its fair share is 9 (see the test below)
    "fair_share_exceeded": Case(
        (job("a2-x", "a2", 4), job("b1-x", "b1", 12)),
        ask("a2", 6),
        "no_idle_capacity_to_borrow",
        "org",
        "gpu",
        16,
        6,
        16,
        ("fair_share_exceeded",),
    ),
    # everything at once: a1's limit (5 + 2 > 6), no idle GPU, and a fair share of 6 (its limit)
    "limit_then_borrowing": Case(
        (job("a1-x", "a1", 5), job("b1-x", "b1", 11)),
        ask("a1", 2),
        "limit",
        "a1",
        "gpu",
        5,
        2,
        6,
        ("no_idle_capacity_to_borrow", "fair_share_exceeded"),
    ),
    "unknown_tenant": Case((), ask("zed", 1), "unknown_tenant", "zed", None, None, None, None),
    "team_is_no_tenant": Case(
        (), ask("team-a", 1), "unknown_tenant", "team-a", None, None, None, None
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_each_answer_code_on_a_hand_computed_case(name: str) -> None:
    case = CASES[name]
    got = answer(case.running, case.pending, case.node_free)
    assert (got.code, got.queue, got.resource) == (case.code, case.queue, case.resource)
    assert (got.used, got.asked, got.bound) == (case.used, case.asked, case.bound)
    assert tuple(other.code for other in got.also) == case.also


def test_every_code_has_a_case() -> None:
    seen = {c.code for c in CASES.values()} | {code for c in CASES.values() for code in c.also}
    assert seen == set(CODES)


def test_limit_says_how_far_to_raise_it_or_how_much_to_wait_for() -> None:
    got = answer(CASES["limit"].running, CASES["limit"].pending)
    assert got.describe() == (
        "a1 holds 5 GPUs and the ask adds 2 GPUs: 7 GPUs is past its gpu limit of 6.\n"
        "Raise a1's gpu limit from 6 to 7, or wait for 1 GPU of its running work to finish."
    )
    team = answer(CASES["ancestor_limit"].running, CASES["ancestor_limit"].pending)
    assert team.change == (
        "Raise team-a's gpu limit from 10 to 11, or wait for 1 GPU of team-a's running work "
        "to finish."
    )
    alone = answer((), ask("a1", 7))
    assert alone.change == (
        "Raise a1's gpu limit from 6 to 7; waiting never helps, the ask alone is over the limit."
    )


def test_preempts_names_the_victims_reclaim_picks() -> None:
    case = CASES["preempts"]
    got = answer(case.running, case.pending)
    assert [v.name for v in got.victims] == ["b-low"]
    assert got.starts
    assert got.change == "Nothing has to change: it starts after preempting b-low (b1)."
    plan = reclaim(tree(), case.running, CAPACITY, "a1", case.pending.resources, MIN_RUNTIME_S)
    assert plan.victims == got.victims


def test_reclaim_waits_for_the_shortest_wait_that_makes_it_enough() -> None:
    """At +100 s b-mid (200 s) is old enough, and preempting it leaves b1 its 4 GPUs; b-low
    (60 s, priority 0) would be preferred but needs 240 s."""
    got = answer(WAITS, ask("a1", 2))
    assert got.wait_s == pytest.approx(100)
    assert [v.name for v in got.victims] == ["b-mid"]
    assert got.change == (
        "Wait 100 s until b-mid passes the 300 s minimum runtime; then preempting b-mid (b1) "
        "makes room."
    )
    assert not reclaim(tree(), WAITS, CAPACITY, "a1", {"gpu": 2}, MIN_RUNTIME_S).met
    later = reclaim(tree(), aged(WAITS, 100), CAPACITY, "a1", {"gpu": 2}, MIN_RUNTIME_S)
    assert [v.name for v in later.victims] == ["b-mid"]


def test_the_wait_lasts_until_reclaim_is_met_not_until_its_victim_is_old_enough() -> None:
    """9 GPUs, 5 CPUs, all held; t0 asks 1 GPU + 1 CPU inside its guarantee. t1 (guarantee 2 GPUs,
    1 CPU) holds 5 GPUs, 5 CPUs; t2 (1 GPU, 1 CPU) holds 4 GPUs. At +16 s w0 and g2 (14 s) are old
    enough: reclaim takes g2 (priority 0), then cannot take w0 too (t1 would keep 1 GPU of its 2).
    At +29 s g5 (1 s) is old enough too: reclaim takes g5 for the GPU, then w0 for the CPU, and
    pruning spares g5. So the wait is 29 s, and the victim is w0."""
    t0, t1 = Queue("t0", {"gpu": 1, "cpu": 1}), Queue("t1", {"gpu": 2, "cpu": 1})
    team_x = Queue("X", {"gpu": 3, "cpu": 2}, children=(t0, t1))
    team_y = Queue("Y", {"gpu": 1, "cpu": 1}, children=(Queue("t2", {"gpu": 1, "cpu": 1}),))
    root = Queue("org", children=(team_x, team_y))
    running = [
        RunningWorkload("w0", "t1", {"gpu": 2, "cpu": 2}, 1, 14),
        RunningWorkload("w8", "t1", {"cpu": 3}, 0, 0),
        RunningWorkload("g2", "t1", {"gpu": 2}, 0, 14),
        RunningWorkload("g3", "t2", {"gpu": 3}, 0, 0),
        RunningWorkload("g4", "t1", {"gpu": 1}, 0, 0),
        RunningWorkload("g5", "t2", {"gpu": 1}, 0, 1),
    ]
    capacity = {"gpu": 9, "cpu": 5}
    check_tree(root, capacity)
    pending = PendingWorkload("p", "t0", {"gpu": 1, "cpu": 1})
    got = why_pending(root, capacity, running, pending, min_runtime_s=30)
    assert got.code == "reclaim_waits_min_runtime"
    assert got.wait_s == 29
    assert [v.name for v in got.victims] == ["w0"]
    assert got.change == (
        "Wait 29 s until g5 passes the 30 s minimum runtime; then preempting w0 (t1) makes room."
    )
    for wait_s, met in ((16, False), (28.5, False), (29, True)):
        assert (
            reclaim(root, aged(running, wait_s), capacity, "t0", pending.resources, 30).met == met
        )


def test_borrowing_tells_the_fair_share() -> None:
    """a1 5 / b1 12 wanted: guarantees 4 / 4, team spares 1 (of a's 4) / 2, the 5 GPUs left to
    b1: a1's share is 5, so it is within it. a2 10 / b1 12: guarantees 4 / 4, team spares 4 / 2,
    the last 2 split 1 / 1: a2's share is 9, one short of the 10 it would hold."""
    within = answer(CASES["no_idle_capacity_to_borrow"].running, ask("a1", 1))
    assert "within its fair share" in within.reason
    assert within.change == (
        "Wait for 1 GPU of running work to finish, or raise a1's gpu guarantee from 4 to 5 (and "
        "the guarantees above it to match) so the claim may reclaim borrowed capacity."
    )
    past = answer(CASES["fair_share_exceeded"].running, ask("a2", 6))
    assert "past its fair share of 9 GPUs" in past.reason
    (share,) = past.also
    assert (share.queue, share.used, share.asked) == ("a2", 4, 6)
    assert share.bound == pytest.approx(9)
    assert share.change == (
        "Wait until the others hold less, so that a2's fair share grows by 1 GPU, or raise a2's "
        "guarantee or weight."
    )


def test_a_guarantee_with_room_above_it_is_raised_alone() -> None:
    """Team T's guarantee of 6 has room for t1's to grow from 2 to 4."""
    team = Queue("T", {"gpu": 6}, children=(Queue("t1", {"gpu": 2}),))
    root = Queue("org", children=(team, Queue("U", children=(Queue("u1"),))))
    running = [job("t1-x", "t1", 2), job("u1-x", "u1", 4)]
    got = why_pending(root, {"gpu": 6}, running, ask("t1", 2), min_runtime_s=0)
    assert got.code == "no_idle_capacity_to_borrow"
    assert got.change == (
        "Wait for 2 GPUs of running work to finish, or raise t1's gpu guarantee from 2 to 4 so "
        "the claim may reclaim borrowed capacity."
    )


def test_no_node_fits_names_the_largest_free_node() -> None:
    case = CASES["no_node_fits"]
    got = answer(case.running, case.pending, case.node_free)
    assert got.change == (
        "A node with 4 GPUs free (the most any node has free is 3 GPUs): wait for work on one "
        "node to finish."
    )
    fits_one = answer(case.running, ask("b2", 3), case.node_free)
    assert fits_one.code == "schedulable"
    assert answer(case.running, case.pending, ()).code == "schedulable"  # no nodes: no check


def test_unknown_tenant_and_a_team_are_told_apart() -> None:
    assert answer((), ask("zed", 1)).reason == (
        "zed is not a queue under org; only tenants run workloads."
    )
    assert "team-a is a team, not a tenant" in answer((), ask("team-a", 1)).reason


def test_a_negative_ask_is_refused() -> None:
    with pytest.raises(ValueError, match="new: gpu must be >= 0"):
        answer((), ask("a1", -1))


# --- properties -------------------------------------------------------------------------------

RESOURCES = ("gpu", "cpu")
PROPERTY_MIN_RUNTIME_S = 30.0


@dataclass(frozen=True)
class Scenario:
    root: Queue
    capacity: dict[str, float]
    running: list[RunningWorkload]
    pending: PendingWorkload
    node_free: list[Resources] | None


@st.composite
def scenarios(draw: st.DrawFn, contended: bool = False) -> Scenario:
    """org -> X (t0, t1), Y (t2, t3): guarantees that fit, limits sometimes, running work that
    fits, and a pending ask on one tenant (or a name that is none). `contended`: no limits, the
    cluster full of the others' work, and an ask inside the claimant's guarantee."""
    capacity = {r: float(draw(st.integers(4, 12))) for r in RESOURCES}
    guarantees = [
        {r: float(draw(st.integers(int(contended), int(capacity[r]) // 4))) for r in RESOURCES}
        for _ in range(4)
    ]

    def limit(guarantee: Resources) -> dict[str, float] | None:
        if contended or draw(st.integers(0, 2)):
            return None
        return {r: guarantee[r] + draw(st.integers(0, 8)) for r in RESOURCES}

    def weight() -> int:
        return draw(st.integers(1, 3))

    tenants = [Queue(f"t{i}", g, limit(g), weight()) for i, g in enumerate(guarantees)]
    teams = [
        Queue(name, g := add(*(t.guarantee for t in members)), limit(g), weight(), members)
        for name, members in (("X", tuple(tenants[:2])), ("Y", tuple(tenants[2:])))
    ]
    root = Queue("org", children=tuple(teams))
    claimant = draw(st.sampled_from(tenants))
    queues = [t.name for t in tenants]
    running: list[RunningWorkload] = []
    used: dict[str, float] = {}

    def start(name: str, tenant: str, size: dict[str, float]) -> None:
        nonlocal used
        age = float(draw(st.integers(0, 60)))
        running.append(RunningWorkload(name, tenant, size, draw(st.integers(0, 2)), age))
        used = add(used, size)

    others = [t.name for t in tenants if t is not claimant]
    for i in range(draw(st.integers(0, 12))):
        size = {r: float(draw(st.integers(0, 3))) for r in RESOURCES}
        if any(size.values()) and fits(add(used, size), capacity):
            # contended: the claimant holds nothing, so that any ask inside its guarantee fits it
            start(f"w{i}", draw(st.sampled_from(others if contended else list(queues))), size)
    if contended or draw(st.booleans()):  # fill what is left with the others' work
        for r in RESOURCES:
            while (left := int(capacity[r] - used.get(r, 0.0))) > 0:
                size = {r: float(draw(st.integers(1, min(left, 3))))}
                start(f"{r}{len(running)}", draw(st.sampled_from(others)), size)
    if contended or draw(st.booleans()):  # inside the guarantee, where reclaim decides
        room = subtract(claimant.guarantee, usage_by_tenant(running).get(claimant.name, {}))
        most = {r: max(0, int(room[r])) for r in RESOURCES}
        resources = {r: float(draw(st.integers(min(1, most[r]), most[r]))) for r in RESOURCES}
    else:
        resources = {r: float(draw(st.integers(0, int(capacity[r]) + 1))) for r in RESOURCES}
    names = [claimant.name] if contended else [claimant.name] * 8 + ["X", "nobody"]
    node_free: list[Resources] | None = None
    if draw(st.booleans()):
        free = subtract(capacity, used)
        cut = {r: draw(st.integers(0, int(free[r]))) for r in RESOURCES}
        node_free = [cut, subtract(free, cut)]
    pending = PendingWorkload("p", draw(st.sampled_from(names)), resources)
    return Scenario(root, capacity, running, pending, node_free)


def held_by(queue: Queue, running: Sequence[RunningWorkload]) -> dict[str, float]:
    usage = usage_by_tenant(running)
    return add(*(usage.get(t.name, {}) for t in queue.tenants()))


def aged(running: Sequence[RunningWorkload], by_s: float) -> list[RunningWorkload]:
    return [
        RunningWorkload(w.name, w.tenant, w.resources, w.priority, w.running_s + by_s)
        for w in running
    ]


def check(scenario: Scenario) -> list[str]:
    """Check one answer against limits, capacity and reclaim; the codes it gave."""
    root, capacity, running, pending = (
        scenario.root,
        scenario.capacity,
        scenario.running,
        scenario.pending,
    )
    got = why_pending(
        root,
        capacity,
        running,
        pending,
        min_runtime_s=PROPERTY_MIN_RUNTIME_S,
        node_free=scenario.node_free,
    )
    everything = [got, *got.also]
    codes = [a.code for a in everything]
    assert set(codes) <= set(CODES)
    assert not set(codes[1:]) & STARTS
    queues = {q.name: q for q in root.walk()}
    if pending.tenant not in {t.name for t in root.tenants()}:
        assert codes == ["unknown_tenant"]
        return codes
    ask = pending.resources
    free = subtract(capacity, add(*(w.resources for w in running)))
    path = [q for q in root.walk() if pending.tenant in {t.name for t in q.tenants()}]
    limits_hold = all(q.limit is None or fits(add(held_by(q, running), ask), q.limit) for q in path)
    for block in everything:
        if block.code in ("limit", "ancestor_limit"):
            queue = queues[block.queue]
            assert queue in path
            assert (block.code == "limit") == (queue.name == pending.tenant)
            assert queue.limit is not None
            assert block.resource is not None
            assert block.used == held_by(queue, running).get(block.resource, 0.0)
            assert block.asked == ask[block.resource]
            assert block.bound == queue.limit.get(block.resource, 0.0)
            assert block.used + block.asked > block.bound
            assert not fits(add(held_by(queue, running), ask), queue.limit)
        if block.code in ("exceeds_capacity", "no_idle_capacity_to_borrow"):
            assert block.resource is not None
            assert block.used is not None
            assert block.bound == capacity[block.resource]
            assert block.used + ask[block.resource] > block.bound
    assert limits_hold == (not {"limit", "ancestor_limit"} & set(codes))
    if got.code == "no_node_fits":
        assert fits(ask, free)
        assert scenario.node_free is not None
        assert not any(fits(ask, node) for node in scenario.node_free)
    if got.code == "schedulable":
        assert fits(ask, free)
        assert scenario.node_free is None or any(fits(ask, node) for node in scenario.node_free)
    tenant = queues[pending.tenant]
    held = usage_by_tenant(running).get(tenant.name, {})
    if fits(ask, capacity) and not fits(ask, free) and fits(add(held, ask), tenant.guarantee):
        plan = reclaim(root, running, capacity, tenant.name, ask, PROPERTY_MIN_RUNTIME_S)
        refused = {"reclaim_waits_min_runtime", "reclaim_not_enough"} & set(codes)
        assert plan.met == (not refused)
        if limits_hold:
            assert plan.met == (got.code == "preempts")
        if got.code == "preempts":
            assert got.victims == plan.victims
            kept = [w for w in running if w not in plan.victims]
            assert fits(ask, subtract(capacity, add(*(w.resources for w in kept))))
    for wait in (a for a in everything if a.code == "reclaim_waits_min_runtime"):
        # the shortest wait after which reclaim is met, with the victims the answer names
        assert wait.wait_s is not None
        assert wait.wait_s > 0
        then = reclaim(
            root, aged(running, wait.wait_s), capacity, tenant.name, ask, PROPERTY_MIN_RUNTIME_S
        )
        assert then.met
        assert [v.name for v in then.victims] == [v.name for v in wait.victims]
        sooner = aged(running, wait.wait_s - 0.5)  # ages are whole seconds
        assert not reclaim(root, sooner, capacity, tenant.name, ask, PROPERTY_MIN_RUNTIME_S).met
    return codes


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_answers_agree_with_limits_capacity_and_reclaim(scenario: Scenario) -> None:
    """Schedulable: it fits the free capacity (and a node) and no limit is exceeded; a limit
    blocks: adding the ask to what that queue holds really exceeds it; reclaim agrees."""
    check(scenario)


@settings(max_examples=150, deadline=None)
@given(scenarios(contended=True))
def test_inside_the_guarantee_on_a_full_cluster_reclaim_decides(scenario: Scenario) -> None:
    """No limits, the cluster full, an ask inside the guarantee: preempts exactly when reclaim is
    met, and otherwise says whether waiting for the minimum runtime is enough."""
    codes = check(scenario)
    assert codes[0] in {"preempts", "reclaim_waits_min_runtime", "reclaim_not_enough"}
