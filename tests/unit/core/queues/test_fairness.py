"""Weighted DRF (the NSDI 2011 worked example) and each queue's fair share on the queue tree."""

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
from gpuplex.core.queues.fair_share import fair_shares
from gpuplex.core.queues.tree import QueueNode, QueueTree

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


def q(
    name: str,
    guarantee: dict[str, float] | None = None,
    *children: QueueNode,
    limit: dict[str, float] | None = None,
    weight: float = 1.0,
) -> QueueNode:
    level = "team" if children else "tenant"
    return QueueNode(name, level, guarantee or {}, limit, weight, children=children)


def tree(capacity: dict[str, float], *children: QueueNode) -> QueueTree:
    root = QueueNode("cluster", "cluster", capacity, capacity, children=children)
    return QueueTree.of(root, capacity)


def org(y_limit: dict[str, float] | None = None) -> QueueTree:
    """10 GPUs; team X guaranteed 6 (x1 4, x2 2), team Y guaranteed 2 (y1 2)."""
    team_x = q("X", {"gpu": 6}, q("x1", {"gpu": 4}), q("x2", {"gpu": 2}))
    team_y = q("Y", {"gpu": 2}, q("y1", {"gpu": 2}), limit=y_limit)
    return tree({"gpu": 10}, team_x, team_y)


def test_fair_shares_guarantees_first_then_drf_and_idle_guarantees_are_borrowed() -> None:
    shares = fair_shares(org(), {"x1": {"gpu": 10}, "y1": {"gpu": 10}})
    assert shares["X"] == pytest.approx({"gpu": 7})
    assert shares["Y"] == pytest.approx({"gpu": 3})
    assert shares["x1"] == pytest.approx({"gpu": 7})  # borrows x2's idle guarantee
    assert shares["x2"] == pytest.approx({"gpu": 0})
    assert shares["cluster"] == pytest.approx({"gpu": 10})


def test_fair_shares_respect_limits_and_demand() -> None:
    shares = fair_shares(org(y_limit={"gpu": 2.5}), {"x1": {"gpu": 10}, "y1": {"gpu": 10}})
    assert shares["Y"] == pytest.approx({"gpu": 2.5})
    assert shares["X"] == pytest.approx({"gpu": 7.5})
    small = fair_shares(org(), {"x1": {"gpu": 1}, "y1": {"gpu": 1}})
    assert small["x1"] == pytest.approx({"gpu": 1})
    assert small["y1"] == pytest.approx({"gpu": 1})


def test_a_limit_binds_only_the_kinds_it_names() -> None:
    capped = tree({"gpu": 8, "cpu": 64}, q("a", limit={"gpu": 2}), q("b"))
    shares = fair_shares(capped, {"a": {"gpu": 8, "cpu": 8}, "b": {"cpu": 8}})
    assert shares["a"] == pytest.approx({"gpu": 2, "cpu": 8})  # its CPUs are not limited


def test_a_team_weight_is_split_among_its_tenants_that_still_want_more() -> None:
    """Without guarantees: each team half the GPUs, X's half split 1:2 by tenant weight; once a
    tenant's demand is met, its team's turn goes to the rest of the cluster."""
    x = q("X", None, q("x1"), q("x2", weight=2))
    root = tree({"gpu": 12}, x, q("Y", None, q("y1")))
    shares = fair_shares(root, {name: {"gpu": 12} for name in ("x1", "x2", "y1")})
    assert shares["x1"] == pytest.approx({"gpu": 2})
    assert shares["x2"] == pytest.approx({"gpu": 4})
    assert shares["y1"] == pytest.approx({"gpu": 6})
    shares = fair_shares(root, {"x1": {"gpu": 1}, "x2": {"gpu": 1}, "y1": {"gpu": 12}})
    assert shares["y1"] == pytest.approx({"gpu": 10})


def test_guarantees_are_honoured_bottom_up_across_three_levels() -> None:
    """cluster -> organisation -> team -> tenant, 12 GPUs, only orgs and a team guaranteed: team
    A1's 4 go to its tenant a; what org A's 8 leave over (4) is split between its teams' tenants
    a and b; org B's 4 go to c; nothing is left for the final fill."""
    org_a = q("A", {"gpu": 8}, q("A1", {"gpu": 4}, q("a")), q("A2", None, q("b")))
    org_b = q("B", {"gpu": 4}, q("B1", None, q("c")))
    shares = fair_shares(tree({"gpu": 12}, org_a, org_b), {n: {"gpu": 12} for n in "abc"})
    assert shares["a"] == pytest.approx({"gpu": 6})
    assert shares["b"] == pytest.approx({"gpu": 2})
    assert shares["c"] == pytest.approx({"gpu": 4})
    assert shares["A"] == pytest.approx({"gpu": 8})


RESOURCES = ("gpu", "cpu")


@st.composite
def two_teams(draw: st.DrawFn) -> QueueTree:
    """Two teams of one or two tenants, guarantees that fit, some limits."""
    capacity = {r: float(draw(st.integers(4, 12))) for r in RESOURCES}
    sizes = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    count = sum(sizes)
    tenants = []
    for i in range(count):
        guarantee = {r: float(draw(st.integers(1, int(capacity[r]) // count))) for r in RESOURCES}
        limit = None
        if draw(st.booleans()):
            limit = {"gpu": guarantee["gpu"] + draw(st.integers(0, 4))}
        tenants.append(q(f"t{i}", guarantee, limit=limit, weight=draw(st.integers(1, 3))))
    x, y = tenants[: sizes[0]], tenants[sizes[0] :]
    team_x = q("X", add(*(t.guarantee for t in x)), *x)
    team_y = q("Y", add(*(t.guarantee for t in y)), *y)
    return tree(capacity, team_x, team_y)


@settings(max_examples=60, deadline=None)
@given(two_teams(), st.lists(st.integers(0, 8), min_size=8, max_size=8))
def test_fair_shares_honour_guarantees_limits_and_the_parent_share(
    queues: QueueTree, amounts: list[int]
) -> None:
    """Each tenant gets what its guarantee covers of its demand, no queue more than it wants or
    its limit allows, and children share out no more than their parent got; at the root,
    capacity left idle means every tenant that could use it has all it wants or is at a limit."""
    root, capacity = queues.root, queues.capacity
    tenants = list(root.tenants())
    demands = {
        t.name: {"gpu": float(amounts[2 * i]), "cpu": float(amounts[2 * i + 1])}
        for i, t in enumerate(tenants)
    }
    shares = fair_shares(queues, demands)
    slack = dict.fromkeys(capacity, 1e-6)
    for queue in root.walk():
        if queue.children:
            assert fits(
                add(*(shares[c.name] for c in queue.children)), add(shares[queue.name], slack)
            )
        wanted = demands.get(queue.name) or add(*(demands[t.name] for t in queue.tenants()))
        assert fits(shares[queue.name], add(wanted, slack))
        if queue.limit is not None:
            named = {k: v for k, v in shares[queue.name].items() if k in queue.limit}
            assert fits(named, add(queue.limit, slack))
        if not queue.children:  # a team's guarantee is honoured through its tenants' ones
            assert fits(clamp(queue.guarantee, wanted), add(shares[queue.name], slack))
    idle = subtract(capacity, shares[root.name])
    for tenant in tenants:
        short = subtract(demands[tenant.name], shares[tenant.name])
        at_limit = tenant.limit is not None and any(
            shares[tenant.name].get(k, 0.0) >= v - 1e-6 for k, v in tenant.limit.items()
        )
        if any(v > 1e-6 for v in short.values()) and not at_limit:
            needed = [r for r, v in demands[tenant.name].items() if v > 0 and r in capacity]
            assert any(idle[r] <= 1e-6 for r in needed)
