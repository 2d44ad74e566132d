"""The `gpuplex queues` file: validation with field paths, conversion to queues and workloads, and
the answers (fair shares by hand, one why_pending code per small case)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.queues.hierarchy import Queue, check_tree
from gpuplex.core.queues.queue_file import (
    ROOT_NAME,
    QueueReport,
    QueueScenario,
    evaluate,
    parse_queue_file,
)
from gpuplex.errors import SpecProblem


def two_orgs(**changes: Any) -> dict[str, Any]:
    """12 GPUs; org x (weight 2) with tenant x1, org y (weight 1) with tenant y1; no guarantees."""
    data: dict[str, Any] = {
        "capacity": {"gpu": 12, "cpu": 96},
        "queues": [
            {"name": "x", "weight": 2, "children": [{"name": "x1"}]},
            {"name": "y", "children": [{"name": "y1"}]},
        ],
    }
    data.update(changes)
    return data


def scenario(data: dict[str, Any]) -> QueueScenario:
    result = parse_queue_file(data)
    assert isinstance(result, QueueScenario), result
    return result


def problems(data: object) -> list[SpecProblem]:
    result = parse_queue_file(data)
    assert isinstance(result, list), "expected problems, got a scenario"
    return result


def report(data: dict[str, Any]) -> QueueReport:
    return evaluate(scenario(data))


def row(result: QueueReport, name: str) -> dict[str, float]:
    return dict(next(r for r in result.queues if r.name == name).fair_share)


# --- conversion -------------------------------------------------------------------------------


def test_the_listed_queues_hang_under_a_root_without_a_guarantee() -> None:
    got = scenario(two_orgs())
    assert got.root.name == ROOT_NAME
    assert got.root.guarantee == {}
    assert [q.name for q in got.root.walk()] == [ROOT_NAME, "x", "x1", "y", "y1"]
    assert got.root.children[0].weight == 2


def test_a_limit_bounds_only_the_resources_it_names() -> None:
    data = two_orgs(
        queues=[{"name": "x", "children": [{"name": "x1", "limit": {"gpu": 4}}]}],
        pending=[{"name": "p", "tenant": "x1", "resources": {"gpu": 2, "cpu": 40}}],
    )
    got = scenario(data)
    x1 = got.root.children[0].children[0]
    assert x1.limit == {"gpu": 4, "cpu": 96}  # the library's limit forbids what it does not name
    assert got.written_limits["x1"] == {"gpu": 4}
    assert evaluate(got).pending[0].answer.code == "schedulable"


def test_workloads_and_nodes_keep_their_numbers() -> None:
    got = scenario(
        two_orgs(
            min_runtime_s=60,
            running=[
                {
                    "name": "r",
                    "tenant": "y1",
                    "resources": {"gpu": 3},
                    "priority": 5,
                    "running_s": 7.5,
                }
            ],
            pending=[{"name": "p", "tenant": "x1", "resources": {"gpu": 1}, "priority": 2}],
            nodes=[{"name": "n", "free": {"gpu": 9}}],
        )
    )
    assert (got.running[0].tenant, got.running[0].priority, got.running[0].running_s) == (
        "y1",
        5,
        7.5,
    )
    assert (got.pending[0].name, got.pending[0].priority) == ("p", 2)
    assert got.node_free == ({"gpu": 9},)
    assert got.min_runtime_s == 60


# --- answers ----------------------------------------------------------------------------------


def test_fair_shares_split_by_the_organisations_weights() -> None:
    # x1 holds 2 and asks 10 more (wants 12), y1 asks 10: 12 GPUs split 2:1 -> 8 and 4.
    result = report(
        two_orgs(
            running=[{"name": "r", "tenant": "x1", "resources": {"gpu": 2}}],
            pending=[
                {"name": "px", "tenant": "x1", "resources": {"gpu": 10}},
                {"name": "py", "tenant": "y1", "resources": {"gpu": 10}},
            ],
        )
    )
    assert row(result, "x1")["gpu"] == pytest.approx(8)
    assert row(result, "y1")["gpu"] == pytest.approx(4)
    assert row(result, "x")["gpu"] == pytest.approx(8)
    holds = {r.name: r.holds["gpu"] for r in result.queues}
    assert holds == {"x": 2, "x1": 2, "y": 0, "y1": 0}
    # every queue's row lists every resource of the capacity, in its order
    assert all(list(r.fair_share) == ["gpu", "cpu"] for r in result.queues)


def test_fair_shares_give_guarantees_first() -> None:
    # y1 is guaranteed 9 of 12 and gets it first; both ask for 12, so the 3 left split 2:1 by
    # the organisations' weights: x1 2, y1 9 + 1
    data = two_orgs(
        queues=[
            {"name": "x", "weight": 2, "children": [{"name": "x1"}]},
            {
                "name": "y",
                "guarantee": {"gpu": 9},
                "children": [{"name": "y1", "guarantee": {"gpu": 9}}],
            },
        ],
        pending=[
            {"name": "px", "tenant": "x1", "resources": {"gpu": 12}},
            {"name": "py", "tenant": "y1", "resources": {"gpu": 12}},
        ],
    )
    result = report(data)
    assert row(result, "x1")["gpu"] == pytest.approx(2)
    assert row(result, "y1")["gpu"] == pytest.approx(10)


GUARANTEED = [
    {"name": "a", "guarantee": {"gpu": 2}, "children": [{"name": "a1", "guarantee": {"gpu": 2}}]},
    {"name": "b", "guarantee": {"gpu": 2}, "children": [{"name": "b1", "guarantee": {"gpu": 2}}]},
]


@pytest.mark.parametrize(
    ("running_s", "ask", "code"),
    [
        (100, 2, "reclaim_waits_min_runtime"),  # b1 borrows 2 GPUs but has run 100 of 300 s
        (400, 2, "preempts"),
        (400, 3, "no_idle_capacity_to_borrow"),  # 3 is past a1's guarantee of 2: only borrows
        (400, 5, "exceeds_capacity"),
    ],
)
def test_each_pending_workload_gets_why_pending_s_answer(
    running_s: float, ask: float, code: str
) -> None:
    data = {
        "capacity": {"gpu": 4},
        "min_runtime_s": 300,
        "queues": GUARANTEED,
        "running": [
            {"name": "b-1", "tenant": "b1", "resources": {"gpu": 2}, "running_s": running_s},
            {"name": "b-2", "tenant": "b1", "resources": {"gpu": 2}, "running_s": running_s},
        ],
        "pending": [{"name": "a-job", "tenant": "a1", "resources": {"gpu": ask}}],
    }
    answer = report(data).pending[0].answer
    assert answer.code == code
    if code == "reclaim_waits_min_runtime":
        assert answer.wait_s == pytest.approx(200)
    if code == "preempts":
        assert [v.tenant for v in answer.victims] == ["b1"]


def test_the_one_node_check_uses_the_nodes_listed() -> None:
    data = two_orgs(
        pending=[{"name": "p", "tenant": "x1", "resources": {"gpu": 4}}],
        nodes=[{"name": "n1", "free": {"gpu": 3}}, {"name": "n2", "free": {"gpu": 3}}],
    )
    assert report(data).pending[0].answer.code == "no_node_fits"
    assert report({**data, "nodes": []}).pending[0].answer.code == "schedulable"


# --- problems ---------------------------------------------------------------------------------

BAD: dict[str, tuple[dict[str, Any], tuple[str | int, ...], str]] = {
    "unknown key": (
        two_orgs(queues=[{"name": "x", "wieght": 2}]),
        ("queues", 0, "wieght"),
        "unknown key 'wieght' (did you mean \"weight\"?)",
    ),
    "unknown key deep": (
        two_orgs(queues=[{"name": "x", "children": [{"name": "x1", "gurantee": {}}]}]),
        ("queues", 0, "children", 0, "gurantee"),
        'did you mean "guarantee"?',
    ),
    "unknown top key": (two_orgs(pendng=[]), ("pendng",), 'did you mean "pending"?'),
    "negative amount": (
        two_orgs(pending=[{"name": "p", "tenant": "x1", "resources": {"gpu": -1}}]),
        ("pending", 0, "resources", "gpu"),
        "greater than or equal to 0",
    ),
    "true as an amount": (
        two_orgs(capacity={"gpu": True}),
        ("capacity", "gpu"),
        "expected a number, got true/false",
    ),
    "zero weight": (
        two_orgs(queues=[{"name": "x", "weight": 0}]),
        ("queues", 0, "weight"),
        "greater than or equal to 0.001",
    ),
    "huge amount": (
        two_orgs(capacity={"gpu": 1e300}),
        ("capacity", "gpu"),
        "less than or equal to 1000000000000000",
    ),
    "tiny capacity": (
        two_orgs(capacity={"gpu": 1e-9}),
        ("capacity", "gpu"),
        "too small to share out",
    ),
    "running past the capacity": (
        two_orgs(
            running=[
                {"name": "r1", "tenant": "x1", "resources": {"gpu": 8}},
                {"name": "r2", "tenant": "y1", "resources": {"gpu": 5}},
            ]
        ),
        ("running",),
        "the running workloads hold 13 gpu, more than the capacity of 12",
    ),
    "exponent without a sign": (
        two_orgs(capacity={"gpu": "1e3"}),
        ("capacity", "gpu"),
        "1e3 is read as text, not a number",
    ),
    "no capacity": ({"queues": [{"name": "x"}]}, ("capacity",), "required field is missing"),
    "unknown resource": (
        two_orgs(running=[{"name": "r", "tenant": "x1", "resources": {"gpus": 1}}]),
        ("running", 0, "resources", "gpus"),
        "unknown resource 'gpus' (did you mean \"gpu\"?)",
    ),
    "team as tenant": (
        two_orgs(pending=[{"name": "p", "tenant": "x", "resources": {"gpu": 1}}]),
        ("pending", 0, "tenant"),
        "'x' has children, so it is not a tenant",
    ),
    "no such tenant": (
        two_orgs(running=[{"name": "r", "tenant": "X1", "resources": {"gpu": 1}}]),
        ("running", 0, "tenant"),
        "no queue named 'X1' (did you mean \"x1\"?)",
    ),
    "children past the parent": (
        two_orgs(
            queues=[
                {
                    "name": "x",
                    "guarantee": {"gpu": 4},
                    "children": [
                        {"name": "x1", "guarantee": {"gpu": 3}},
                        {"name": "x2", "guarantee": {"gpu": 2}},
                    ],
                }
            ]
        ),
        ("queues", 0, "children"),
        "gpu guarantees here add up to 5 (x1 3, x2 2), past x's guarantee of 4",
    ),
    "top level past the capacity": (
        two_orgs(queues=[{"name": "x", "guarantee": {"gpu": 13}}]),
        ("queues",),
        "past the capacity of 12",
    ),
    "guarantee past the limit": (
        two_orgs(queues=[{"name": "x", "guarantee": {"gpu": 5}, "limit": {"gpu": 4}}]),
        ("queues", 0, "guarantee", "gpu"),
        "x's gpu guarantee of 5 is past its own limit of 4",
    ),
    "duplicate queue": (
        two_orgs(queues=[{"name": "x", "children": [{"name": "x"}]}]),
        ("queues", 0, "children", 0, "name"),
        "queue 'x' is already at queues[0]",
    ),
    "the root's name": (
        two_orgs(queues=[{"name": ROOT_NAME}]),
        ("queues", 0, "name"),
        "the name of the tree's root",
    ),
    "duplicate workload": (
        two_orgs(
            pending=[
                {"name": "p", "tenant": "x1", "resources": {"gpu": 1}},
                {"name": "p", "tenant": "y1", "resources": {"gpu": 1}},
            ]
        ),
        ("pending", 1, "name"),
        "listed twice",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_files_name_the_field_and_what_is_wrong(case: str) -> None:
    data, path, message = BAD[case]
    found = problems(data)
    assert any(p.path == path and message in p.message for p in found), found


@pytest.mark.parametrize(
    ("data", "message"),
    [(None, "the file is empty"), ([1, 2], "expected a mapping"), ("text", "got str")],
)
def test_a_document_that_is_not_a_mapping_is_refused(data: object, message: str) -> None:
    (problem,) = problems(data)
    assert problem.path == ()
    assert message in problem.message


amounts = st.integers(min_value=0, max_value=6)
any_amount = st.sampled_from([0.0, 5e-324, 1e-9, 0.5, 1.0, 3.0, 1e15])


@settings(max_examples=300, deadline=None)
@given(
    capacity=any_amount,
    guarantee=any_amount,
    weight=st.sampled_from([1e-3, 1.0, 1e6]),
    running=st.lists(st.tuples(any_amount, st.floats(0, 1e3)), max_size=3),
    asks=st.lists(any_amount, min_size=1, max_size=3),
    node=st.none() | any_amount,
)
def test_every_file_that_validates_is_answered(
    capacity: float,
    guarantee: float,
    weight: float,
    running: list[tuple[float, float]],
    asks: list[float],
    node: float | None,
) -> None:
    """Extreme amounts and weights within the accepted ranges never make the answers fail."""
    data = {
        "capacity": {"gpu": capacity},
        "min_runtime_s": 100,
        "queues": [
            {"name": "x", "weight": weight, "children": [{"name": "x1"}]},
            {
                "name": "y",
                "guarantee": {"gpu": guarantee},
                "children": [{"name": "y1", "guarantee": {"gpu": guarantee}}],
            },
        ],
        "running": [
            {"name": f"r{i}", "tenant": "x1", "resources": {"gpu": g}, "running_s": s}
            for i, (g, s) in enumerate(running)
        ],
        "pending": [
            {"name": f"p{i}", "tenant": ("x1", "y1")[i % 2], "resources": {"gpu": g}}
            for i, g in enumerate(asks)
        ],
        "nodes": [] if node is None else [{"name": "n", "free": {"gpu": node}}],
    }
    result = parse_queue_file(data)
    if isinstance(result, list):  # a guarantee or running work past the capacity, or a tiny one
        assert {p.path for p in result} <= {("queues",), ("running",), ("capacity", "gpu")}
        return
    got = evaluate(result)
    assert [row.answer.code for row in got.pending] != []


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(min_value=0, max_value=12),
    org=amounts,
    org_limit=st.none() | amounts,
    tenants=st.lists(amounts, min_size=1, max_size=3),
    other=amounts,
)
def test_the_file_refuses_exactly_the_trees_check_tree_refuses(
    capacity: int, org: int, org_limit: int | None, tenants: list[int], other: int
) -> None:
    """The positioned rules of the file and the library's check_tree agree on every tree."""
    children = [{"name": f"t{i}", "guarantee": {"gpu": g}} for i, g in enumerate(tenants)]
    queue: dict[str, Any] = {"name": "org", "guarantee": {"gpu": org}, "children": children}
    if org_limit is not None:
        queue["limit"] = {"gpu": org_limit}
    data = {
        "capacity": {"gpu": capacity},
        "queues": [queue, {"name": "other", "guarantee": {"gpu": other}}],
    }
    result = parse_queue_file(data)
    tree = Queue(
        ROOT_NAME,
        children=(
            Queue(
                "org",
                {"gpu": org},
                None if org_limit is None else {"gpu": org_limit},
                children=tuple(Queue(f"t{i}", {"gpu": g}) for i, g in enumerate(tenants)),
            ),
            Queue("other", {"gpu": other}),
        ),
    )
    try:
        check_tree(tree, {"gpu": capacity})
    except ValueError:
        assert isinstance(result, list)
        assert all(p.path[0] == "queues" for p in result)
    else:
        assert isinstance(result, QueueScenario), result
