"""Where each queue stands: use adds up from a tenant's queue to every queue above it, borrowed is
the use above the guarantee, a limit binds only the kinds it names, a holding of a tenant
without a queue counts only in the cluster's, and the cluster lists only the kinds in use or named
by a queue."""

from __future__ import annotations

from hypothesis import given, strategies as st

from gpuplex.core.queues.admission import Holding
from gpuplex.core.queues.standing import KindStanding, QueueStanding, kind_order, standings
from gpuplex.core.queues.tree import tree_of
from gpuplex.core.spec.queues import QueuesSpec
from gpuplex.core.spec.quota_kinds import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX

CAPACITY = {GPUS: 8.0, GPU_MEMORY_GIB: 640.0, COMPUTE_PERCENT: 800.0, MIG_PREFIX + "1g.10gb": 14.0}
QUEUES = QueuesSpec.model_validate(
    {
        "organisations": [
            {
                "name": "acme",
                "guarantee": {"gpus": 4},
                "limit": {"gpus": 6},
                "teams": [
                    {
                        "name": "research",
                        "guarantee": {"gpus": 4},
                        "tenants": [
                            {"name": "alpha", "guarantee": {"gpus": 2}, "weight": 3},
                            {"name": "bravo", "borrow": False, "lend": False},
                        ],
                    }
                ],
            },
            {
                "name": "globex",
                "teams": [
                    {
                        "name": "ops",
                        "tenants": [{"name": "charlie", "guarantee": {"mig": {"1g.10gb": 2}}}],
                    }
                ],
            },
        ]
    }
)


def by_name(rows: list[QueueStanding]) -> dict[str, QueueStanding]:
    return {row.name: row for row in rows}


def kinds(row: QueueStanding) -> dict[str, KindStanding]:
    return {k.kind: k for k in row.kinds}


def test_use_adds_up_the_tree_and_borrowed_is_above_the_guarantee() -> None:
    tree = tree_of(QUEUES, CAPACITY)
    holdings = [
        Holding("a1", "alpha", {GPUS: 3.0}),
        Holding("b1", "bravo", {GPU_MEMORY_GIB: 20.0, COMPUTE_PERCENT: 50.0}),
        Holding("c1", "charlie", {MIG_PREFIX + "1g.10gb": 1.0}),
        Holding("d1", "delta", {GPUS: 1.0}),  # a tenant without a queue
    ]
    rows = standings(tree, holdings)
    assert [r.name for r in rows] == [
        "cluster",
        "acme",
        "research",
        "alpha",
        "bravo",
        "globex",
        "ops",
        "charlie",
    ]
    row = by_name(rows)
    alpha = kinds(row["alpha"])[GPUS]
    assert (alpha.guarantee, alpha.limit, alpha.in_use, alpha.borrowed) == (2.0, None, 3.0, 1.0)
    assert (row["alpha"].weight, row["alpha"].parent, row["alpha"].depth) == (3.0, "research", 3)
    assert (row["bravo"].lends, row["bravo"].borrows) == (False, False)
    bravo = kinds(row["bravo"])
    assert bravo[GPU_MEMORY_GIB].borrowed == 20.0  # no guarantee of its own: all of it borrowed
    assert list(bravo) == [GPU_MEMORY_GIB, COMPUTE_PERCENT]
    research = kinds(row["research"])
    assert (research[GPUS].in_use, research[GPUS].borrowed) == (3.0, 0.0)
    acme = kinds(row["acme"])[GPUS]
    assert (acme.guarantee, acme.limit, acme.in_use) == (4.0, 6.0, 3.0)
    # acme's limit names gpus only: memory is not limited there
    assert kinds(row["acme"])[GPU_MEMORY_GIB].limit is None
    charlie = kinds(row["charlie"])[MIG_PREFIX + "1g.10gb"]
    assert (charlie.guarantee, charlie.in_use, charlie.borrowed) == (2.0, 1.0, 0.0)
    assert GPUS not in kinds(row["globex"])  # neither guaranteed, limited nor used there
    cluster = kinds(row["cluster"])
    assert (cluster[GPUS].in_use, cluster[GPUS].limit) == (4.0, 8.0)  # delta's GPU counts here
    assert cluster[MIG_PREFIX + "1g.10gb"].guarantee == 14.0


def test_an_idle_tree_lists_only_what_queues_guarantee_or_limit() -> None:
    row = by_name(standings(tree_of(QUEUES, CAPACITY), []))
    assert [k.kind for k in row["alpha"].kinds] == [GPUS]
    assert row["ops"].kinds == ()
    assert all(k.in_use == 0.0 and k.borrowed == 0.0 for r in row.values() for k in r.kinds)
    # the cluster lists the kinds some queue guarantees or limits, not all the fleet has
    assert [k.kind for k in row["cluster"].kinds] == [GPUS, MIG_PREFIX + "1g.10gb"]


def test_kinds_come_in_a_fixed_order() -> None:
    mixed = [MIG_PREFIX + "3g.40gb", COMPUTE_PERCENT, MIG_PREFIX + "1g.10gb", GPUS, GPU_MEMORY_GIB]
    assert sorted(mixed, key=kind_order) == [
        GPUS,
        GPU_MEMORY_GIB,
        COMPUTE_PERCENT,
        MIG_PREFIX + "1g.10gb",
        MIG_PREFIX + "3g.40gb",
    ]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["alpha", "bravo", "charlie", "delta"]),
            st.integers(min_value=0, max_value=4),
        ),
        max_size=12,
    )
)
def test_a_parent_uses_what_its_children_use_and_the_cluster_everything(
    held: list[tuple[str, int]],
) -> None:
    tree = tree_of(QUEUES, CAPACITY)
    holdings = [Holding(f"h{i}", t, {GPUS: float(n)}) for i, (t, n) in enumerate(held)]
    row = by_name(standings(tree, holdings))

    def used(name: str) -> float:
        found = kinds(row[name]).get(GPUS)
        return found.in_use if found is not None else 0.0

    for name, path in tree.paths.items():
        queue = path[-1]
        if queue.children and queue is not tree.root:
            assert used(name) == sum(used(c.name) for c in queue.children)
    assert used("cluster") == sum(n for _, n in held)
    for r in row.values():
        for k in r.kinds:
            assert k.borrowed == max(0.0, k.in_use - k.guarantee)
