"""Weighted DRF (the NSDI 2011 worked example) and hierarchical queues: fair shares and reclaim."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.queues.drf import (
    DrfTenant,
    add,
    clamp,
    dominant_share,
    drf_allocate,
    fits,
    split_by_drf,
    subtract,
)
from gpuplex.core.queues.hierarchy import (
    Queue,
    ReclaimPlan,
    RunningWorkload,
    check_tree,
    fair_shares,
    reclaim,
    usage_by_tenant,
)

PAPER_CAPACITY = {"cpu": 9, "memory_gb": 18}
PAPER_A = DrfTenant("A", {"cpu": 1, "memory_gb": 4})
PAPER_B = DrfTenant("B", {"cpu": 3, "memory_gb": 1})

# --- DRF: progressive filling -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("order", "schedule"),
    [((PAPER_B, PAPER_A), ("B", "A", "A", "B", "A")), ((PAPER_A, PAPER_B), tuple("ABABA"))],
)
def test_drf_paper_example(order: tuple[DrfTenant, DrfTenant], schedule: tuple[str, ...]) -> None:
    """§4.1 of the paper: A gets 3 tasks <3 CPU, 12 GB>, B 2 tasks <6 CPU, 2 GB>, both at 2/3."""
    allocation = drf_allocate(PAPER_CAPACITY, order)
    assert allocation.tasks == {"A": 3, "B": 2}
    assert allocation.dominant_shares == pytest.approx({"A": 2 / 3, "B": 2 / 3})
    assert allocation.used == pytest.approx({"cpu": 9, "memory_gb": 14})
    assert allocation.schedule == schedule


def test_drf_weights_divide_in_proportion() -> None:
    allocation = drf_allocate(
        {"gpu": 9}, [DrfTenant("heavy", {"gpu": 1}, weight=2), DrfTenant("light", {"gpu": 1})]
    )
    assert allocation.tasks == {"heavy": 6, "light": 3}


def test_drf_tenant_whose_demand_runs_out_leaves_the_rest_to_others() -> None:
    allocation = drf_allocate(
        {"cpu": 10}, [DrfTenant("small", {"cpu": 1}, max_tasks=2), DrfTenant("big", {"cpu": 1})]
    )
    assert allocation.tasks == {"small": 2, "big": 8}
    none_wanted = drf_allocate({"cpu": 4}, [DrfTenant("idle", {"cpu": 1}, max_tasks=0)])
    assert none_wanted.tasks == {"idle": 0}


def test_drf_any_resource_names_and_a_resource_the_cluster_lacks() -> None:
    allocation = drf_allocate(
        {"gpu_milli": 4000, "memory_mib": 80_000},
        [DrfTenant("llm", {"gpu_milli": 1000, "memory_mib": 40_000}), DrfTenant("tpu", {"tpu": 1})],
    )
    assert allocation.tasks == {"llm": 2, "tpu": 0}
    assert allocation.dominant_shares["llm"] == pytest.approx(1.0)


def test_drf_refuses_input_it_cannot_finish() -> None:
    with pytest.raises(ValueError, match="needs max_tasks"):
        drf_allocate({"cpu": 1}, [DrfTenant("free", {"cpu": 0})])
    with pytest.raises(ValueError, match="weight"):
        drf_allocate({"cpu": 1}, [DrfTenant("a", {"cpu": 1}, weight=0)])
    with pytest.raises(ValueError, match="unique"):
        drf_allocate({"cpu": 1}, [PAPER_A, PAPER_A])


def test_dominant_share_skips_resources_of_zero_capacity() -> None:
    assert dominant_share({"cpu": 3, "gpu": 1}, {"cpu": 9, "gpu": 0}) == pytest.approx(1 / 3)


@settings(max_examples=40, deadline=None)
@given(
    capacity=st.integers(1, 30),
    demands=st.lists(st.integers(1, 5), min_size=1, max_size=4),
)
def test_drf_single_resource_is_pareto_efficient_and_max_min(
    capacity: int, demands: list[int]
) -> None:
    """One resource: nobody's next task fits any more (Pareto), and max-min within one task: when
    a tenant got its last task, every tenant with tasks no bigger was still in the running, so
    had at least the share the winner had before that task."""
    tenants = [DrfTenant(f"t{i}", {"cpu": d}) for i, d in enumerate(demands)]
    allocation = drf_allocate({"cpu": capacity}, tenants)
    free = capacity - allocation.used["cpu"]
    assert all(d > free for d in demands)
    for t in tenants:
        for other in tenants:
            if (
                allocation.tasks[other.name] > 0
                and t.task_demand["cpu"] <= other.task_demand["cpu"]
            ):
                before = (allocation.tasks[other.name] - 1) * other.task_demand["cpu"] / capacity
                assert before <= allocation.dominant_shares[t.name] + 1e-9


# --- Queues: fair shares ----------------------------------------------------------------------


def test_split_by_drf_on_the_paper_example_is_divisible_drf() -> None:
    extras = split_by_drf(
        PAPER_CAPACITY,
        {"A": {"cpu": 9, "memory_gb": 36}, "B": {"cpu": 9, "memory_gb": 3}},
        {"A": 1.0, "B": 1.0},
        PAPER_CAPACITY,
    )
    assert extras["A"] == pytest.approx({"cpu": 3, "memory_gb": 12})
    assert extras["B"] == pytest.approx({"cpu": 6, "memory_gb": 2})


def org(y_limit: dict[str, float] | None = None) -> Queue:
    """10 GPUs; team X guaranteed 6 (x1 4, x2 2), team Y guaranteed 2 (y1 2)."""
    team_x = Queue("X", {"gpu": 6}, children=(Queue("x1", {"gpu": 4}), Queue("x2", {"gpu": 2})))
    team_y = Queue("Y", {"gpu": 2}, limit=y_limit, children=(Queue("y1", {"gpu": 2}),))
    return Queue("org", children=(team_x, team_y))


def test_fair_shares_guarantees_first_then_drf_and_idle_guarantees_are_borrowed() -> None:
    shares = fair_shares(org(), {"gpu": 10}, {"x1": {"gpu": 10}, "y1": {"gpu": 10}})
    assert shares["X"] == pytest.approx({"gpu": 7})
    assert shares["Y"] == pytest.approx({"gpu": 3})
    assert shares["x1"] == pytest.approx({"gpu": 7})  # borrows x2's idle guarantee
    assert shares["x2"] == pytest.approx({"gpu": 0})


def test_fair_shares_respect_limits_and_demand() -> None:
    shares = fair_shares(
        org(y_limit={"gpu": 2.5}), {"gpu": 10}, {"x1": {"gpu": 10}, "y1": {"gpu": 10}}
    )
    assert shares["Y"] == pytest.approx({"gpu": 2.5})
    assert shares["X"] == pytest.approx({"gpu": 7.5})
    small = fair_shares(org(), {"gpu": 10}, {"x1": {"gpu": 1}, "y1": {"gpu": 1}})
    assert small["x1"] == pytest.approx({"gpu": 1})
    assert small["y1"] == pytest.approx({"gpu": 1})


def test_a_team_weight_is_split_among_its_tenants_that_still_want_more() -> None:
    """Without guarantees: each team half the GPUs, X's half split 1:2 by tenant weight; once a
    tenant's demand is met, its team's turn goes to the rest of the cluster."""
    x = Queue("X", children=(Queue("x1"), Queue("x2", weight=2)))
    root = Queue("org", children=(x, Queue("Y", children=(Queue("y1"),))))
    shares = fair_shares(root, {"gpu": 12}, {name: {"gpu": 12} for name in ("x1", "x2", "y1")})
    assert shares["x1"] == pytest.approx({"gpu": 2})
    assert shares["x2"] == pytest.approx({"gpu": 4})
    assert shares["y1"] == pytest.approx({"gpu": 6})
    shares = fair_shares(root, {"gpu": 12}, {"x1": {"gpu": 1}, "x2": {"gpu": 1}, "y1": {"gpu": 12}})
    assert shares["y1"] == pytest.approx({"gpu": 10})


def test_guarantees_are_honoured_bottom_up_across_three_levels() -> None:
    """cluster -> organisation -> team -> tenant, 12 GPUs, only orgs and a team guaranteed: team
    A1's 4 go to its tenant a; what org A's 8 leave over (4) is split between its teams' tenants
    a and b; org B's 4 go to c; nothing is left for the final fill."""
    org_a = Queue(
        "A",
        {"gpu": 8},
        children=(
            Queue("A1", {"gpu": 4}, children=(Queue("a"),)),
            Queue("A2", children=(Queue("b"),)),
        ),
    )
    org_b = Queue("B", {"gpu": 4}, children=(Queue("B1", children=(Queue("c"),)),))
    root = Queue("cluster", children=(org_a, org_b))
    check_tree(root, {"gpu": 12})
    shares = fair_shares(root, {"gpu": 12}, {name: {"gpu": 12} for name in "abc"})
    assert shares["a"] == pytest.approx({"gpu": 6})
    assert shares["b"] == pytest.approx({"gpu": 2})
    assert shares["c"] == pytest.approx({"gpu": 4})
    assert shares["A"] == pytest.approx({"gpu": 8})


def test_check_tree_refuses_guarantees_that_cannot_all_hold() -> None:
    check_tree(org(), {"gpu": 10})
    with pytest.raises(ValueError, match=r"exceed the capacity|exceed its own"):
        check_tree(org(), {"gpu": 7})
    over = Queue("org", children=(Queue("X", {"gpu": 1}, children=(Queue("x1", {"gpu": 2}),)),))
    with pytest.raises(ValueError, match="children's guarantees"):
        check_tree(over, {"gpu": 10})
    with pytest.raises(ValueError, match="its limit"):
        check_tree(Queue("org", children=(Queue("t", {"gpu": 2}, limit={"gpu": 1}),)), {"gpu": 9})


# --- Queues: reclaim --------------------------------------------------------------------------


def job(
    name: str, tenant: str, gpu: int = 1, priority: int = 0, running_s: float = 100
) -> RunningWorkload:
    return RunningWorkload(name, tenant, {"gpu": gpu}, priority, running_s)


def test_reclaim_takes_lowest_priority_then_shortest_running() -> None:
    # 10 GPUs full: y1 borrows 6 beyond its guarantee of 2; x1 (guarantee 4) holds 2
    running = [
        job("x1-a", "x1", 2),
        job("y-high", "y1", 2, priority=5, running_s=50),
        job("y-old", "y1", 2, priority=1, running_s=500),
        job("y-young", "y1", 2, priority=1, running_s=60),
        job("y-low", "y1", 2, priority=0, running_s=900),
    ]
    plan = reclaim(org(), running, {"gpu": 10}, "x1", {"gpu": 2}, min_runtime_s=30)
    assert [v.name for v in plan.victims] == ["y-low"]
    plan = reclaim(org(), running, {"gpu": 10}, "x1", {"gpu": 2}, min_runtime_s=600)
    assert [v.name for v in plan.victims] == ["y-low"]  # only y-low has run long enough
    plan = reclaim(org(), [*running[:-1], job("y-1", "y1", 1)], {"gpu": 9}, "x1", {"gpu": 2}, 0)
    # greedy takes y-1 then y-young; pruning spares y-1, which y-young alone makes unneeded
    assert [v.name for v in plan.victims] == ["y-young"]


def test_reclaim_never_before_minimum_runtime() -> None:
    running = [job("x1-a", "x1", 2), job("y-new", "y1", 8, running_s=5)]
    plan = reclaim(org(), running, {"gpu": 10}, "x1", {"gpu": 2}, min_runtime_s=30)
    assert not plan.met
    assert plan.refused is not None
    assert "old enough" in plan.refused


def test_reclaim_only_inside_the_guarantee_and_not_when_capacity_is_free() -> None:
    running = [job("y", "y1", 8)]
    over = reclaim(org(), running, {"gpu": 10}, "x1", {"gpu": 5}, 0)
    assert over == ReclaimPlan((), "x1 would exceed its guarantee; only guarantees reclaim")
    assert reclaim(org(), running, {"gpu": 10}, "x1", {"gpu": 2}, 0) == ReclaimPlan(())


def test_reclaim_never_pushes_a_victim_below_its_own_guarantee() -> None:
    # 9 GPUs full. x2 holds 6 (guarantee 2) in one job, y1 holds 3 (guarantee 2): only y-1 can go
    running = [job("x2", "x2", 6), job("y-2", "y1", 2, priority=0), job("y-1", "y1", 1, 9)]
    plan = reclaim(org(), running, {"gpu": 9}, "x1", {"gpu": 1}, 0)
    assert [v.name for v in plan.victims] == ["y-1"]


# --- Queue properties -------------------------------------------------------------------------

RESOURCES = ("gpu", "cpu")
MIN_RUNTIME_S = 10.0


@st.composite
def scenarios(
    draw: st.DrawFn, unit_jobs: bool = False
) -> tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]]:
    """A two-team tree with guarantees that fit, running workloads that fit, and a claim that
    stays inside the claimant's guarantee."""
    resources = ("gpu",) if unit_jobs else RESOURCES
    capacity = {r: float(draw(st.integers(4, 12))) for r in resources}
    team_sizes = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    n_tenants = sum(team_sizes)
    guarantees = [
        {r: float(draw(st.integers(1, int(capacity[r]) // n_tenants))) for r in resources}
        for _ in range(n_tenants)
    ]
    tenants = [Queue(f"t{i}", g, weight=draw(st.integers(1, 3))) for i, g in enumerate(guarantees)]
    teams = (
        Queue("X", add(*guarantees[: team_sizes[0]]), children=tuple(tenants[: team_sizes[0]])),
        Queue("Y", add(*guarantees[team_sizes[0] :]), children=tuple(tenants[team_sizes[0] :])),
    )
    root = Queue("org", children=teams)
    running: list[RunningWorkload] = []
    used: dict[str, float] = {}
    for i in range(draw(st.integers(0, 14))):
        tenant = draw(st.sampled_from(tenants)).name
        size = {"gpu": 1.0} if unit_jobs else {r: float(draw(st.integers(0, 3))) for r in resources}
        if not any(size.values()) or not fits(add(used, size), capacity):
            continue
        used = add(used, size)
        running_s = 100.0 if unit_jobs else float(draw(st.integers(0, 60)))
        running.append(RunningWorkload(f"w{i}", tenant, size, draw(st.integers(0, 2)), running_s))
    # fill what is left with one-unit jobs of the others, so that most claims must preempt
    claimant = draw(st.sampled_from(tenants))
    others = [t for t in tenants if t is not claimant] or tenants
    for resource in resources:
        for i in range(int(capacity[resource] - used.get(resource, 0.0))):
            tenant = draw(st.sampled_from(others)).name
            running_s = 100.0 if unit_jobs else float(draw(st.integers(0, 60)))
            unit = {resource: 1.0}
            running.append(
                RunningWorkload(f"{resource}{i}", tenant, unit, draw(st.integers(0, 2)), running_s)
            )
    room = subtract(claimant.guarantee, usage_by_tenant(running).get(claimant.name, {}))
    most = {r: max(0, int(room.get(r, 0))) for r in resources}
    request = {r: float(draw(st.integers(min(1, most[r]), most[r]))) for r in resources}
    return root, capacity, running, claimant.name, request


def apply(plan: ReclaimPlan, running: list[RunningWorkload]) -> list[RunningWorkload]:
    return [w for w in running if w not in plan.victims]


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_guarantees_hold_after_reclaim(
    scenario: tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]],
) -> None:
    """When reclaim says yes, the claim fits, and every victim's tenant keeps its guarantee."""
    root, capacity, running, claimant, request = scenario
    check_tree(root, capacity)
    plan = reclaim(root, running, capacity, claimant, request, MIN_RUNTIME_S)
    if not plan.met:
        return
    after = apply(plan, running)
    assert fits(request, subtract(capacity, add(*(w.resources for w in after))))
    before_usage, after_usage = usage_by_tenant(running), usage_by_tenant(after)
    guarantees = {t.name: t.guarantee for t in root.tenants()}
    for victim in plan.victims:
        assert victim.tenant != claimant
        assert victim.running_s >= MIN_RUNTIME_S
        kept = clamp(guarantees[victim.tenant], before_usage[victim.tenant])
        assert fits(kept, after_usage.get(victim.tenant, {}))


@settings(max_examples=60, deadline=None)
@given(scenarios(unit_jobs=True))
def test_a_claim_inside_the_guarantee_is_always_met_when_workloads_are_divisible(
    scenario: tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]],
) -> None:
    """One-GPU workloads, all old enough: whatever a tenant's guarantee promises, it gets."""
    root, capacity, running, claimant, request = scenario
    assert reclaim(root, running, capacity, claimant, request, MIN_RUNTIME_S).met


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_nobody_is_preempted_to_give_another_more_than_its_fair_share(
    scenario: tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]],
) -> None:
    """The claimant ends at most at its fair share, and no victim can preempt back (no loops)."""
    root, capacity, running, claimant, request = scenario
    plan = reclaim(root, running, capacity, claimant, request, MIN_RUNTIME_S)
    if not plan.met or not plan.victims:
        return
    usage = usage_by_tenant(running)
    claimant_after = add(usage.get(claimant, {}), request)
    demands = {**usage, claimant: claimant_after}
    shares = fair_shares(root, capacity, demands)
    assert fits(claimant_after, add(shares[claimant], dict.fromkeys(claimant_after, 1e-6)))
    started = RunningWorkload("claim", claimant, request, 0, MIN_RUNTIME_S)
    after = [*apply(plan, running), started]
    for victim in plan.victims:
        back = reclaim(root, after, capacity, victim.tenant, victim.resources, 0)
        assert back.victims == ()  # it runs on free capacity or waits; it never preempts


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_preemption_sets_are_minimal(
    scenario: tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]],
) -> None:
    """Sparing any one victim leaves the claim unmet."""
    root, capacity, running, claimant, request = scenario
    plan = reclaim(root, running, capacity, claimant, request, MIN_RUNTIME_S)
    for spared in plan.victims:
        still = [w for w in running if w not in plan.victims or w is spared]
        free = subtract(capacity, add(*(w.resources for w in still)))
        assert not fits(request, free)


@settings(max_examples=40, deadline=None)
@given(scenarios(), st.lists(st.integers(0, 8), min_size=8, max_size=8))
def test_fair_shares_honour_guarantees_limits_and_the_parent_share(
    scenario: tuple[Queue, dict[str, float], list[RunningWorkload], str, dict[str, float]],
    amounts: list[int],
) -> None:
    """Each tenant gets what its guarantee covers of its demand, no queue more than it wants,
    and children share out no more than their parent got; at the root, capacity left idle means every
    tenant that could use it has all it wants."""
    root, capacity, _, _, _ = scenario
    tenants = list(root.tenants())
    demands = {
        t.name: {"gpu": float(amounts[2 * i]), "cpu": float(amounts[2 * i + 1])}
        for i, t in enumerate(tenants)
    }
    shares = fair_shares(root, capacity, demands)
    slack = dict.fromkeys(capacity, 1e-6)
    for queue in root.walk():
        if queue.children:
            assert fits(
                add(*(shares[c.name] for c in queue.children)), add(shares[queue.name], slack)
            )
        wanted = demands.get(queue.name) or add(*(demands[t.name] for t in queue.tenants()))
        assert fits(shares[queue.name], add(wanted, slack))
        if not queue.children:  # a team's guarantee is honoured through its tenants' ones
            assert fits(clamp(queue.guarantee, wanted), add(shares[queue.name], slack))
    idle = subtract(capacity, shares[root.name])
    for tenant in tenants:
        short = subtract(demands[tenant.name], shares[tenant.name])
        if any(v > 1e-6 for v in short.values()):
            needed = [r for r, v in demands[tenant.name].items() if v > 0 and r in capacity]
            assert any(idle[r] <= 1e-6 for r in needed)
