"""The planner's bookkeeping that exists only for speed keeps the answers it replaced."""

from __future__ import annotations

import gc
import random
from bisect import bisect_left

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.plan.demand import Unit, size_on
from gpuplex.core.plan.index import FleetIndex, GroupIndex
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.occupancy import Hold
from gpuplex.core.plan.placer import make_plan
from gpuplex.core.plan.sorted_lists import EmptyGpus
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy, TenantSpec
from gpuplex.core.target import Target

TENANT = TenantSpec.model_validate({"name": "t", "workloads": []})


def test_empty_gpus_answer_as_a_sorted_list_does() -> None:
    rng = random.Random(7)
    entries = [((node, index), node * 8 + index) for node in range(50) for index in range(8)]
    empty, reference = EmptyGpus(), list[tuple[tuple[int, int], int]]()
    for _ in range(2000):
        entry = rng.choice(entries)
        if entry in reference:
            empty.remove(entry)
            reference.remove(entry)
        else:
            empty.add(entry)
            reference.append(entry)
        reference.sort()
        assert empty.first() == (reference[0] if reference else None)
        assert len(empty) == len(reference)
    assert list(empty) == reference


def test_removing_a_gpu_that_is_not_listed_is_a_bug_said_loudly() -> None:
    empty = EmptyGpus()
    empty.add(((0, 0), 0))
    with pytest.raises(KeyError):
        empty.remove(((0, 1), 1))


SPEC = {
    "fleet": {"nodes": [{"name": "n1", "gpus": [{"model": "H100-80GB", "count": 2}]}]},
    "tenants": [
        {"name": "acme", "workloads": [{"name": "chat", "replicas": 2, "gpu": {"count": 1}}]}
    ],
}


@pytest.mark.parametrize("collecting", [True, False])
def test_planning_leaves_the_garbage_collector_as_it_found_it(collecting: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        plan = make_plan(GpuplexSpec.model_validate(SPEC))
        assert plan.summary.replicas_placed == 2
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def mps_unit(number: int, memory_gib: int, threads: int) -> Unit:
    return Unit(
        ("t", "w", number), TENANT, Mode.MPS, None, 1, memory_gib * 1024, threads, None, None
    )


def scanned_share(index: FleetIndex, group: GroupIndex, unit: Unit, spread: bool) -> int | None:
    """The GPU the planner picked before the lists by threads left: a walk of every MPS GPU
    with memory enough, tightest first (spread: loosest), to the first the replica fits."""
    sized = size_on(unit, group.first.model)
    assert sized is not None
    listed = group.shares[Mode.MPS]
    fitting = listed[bisect_left(listed, (sized.memory_mib,)) :]
    for _, _, gpu_id in reversed(fitting) if spread else fitting:
        if isinstance(index.fit(unit, sized, index.states[gpu_id]), int):
            return gpu_id
    return None


@settings(max_examples=120, deadline=None)
@given(
    nodes=st.integers(1, 4),
    steps=st.lists(
        st.tuples(st.integers(1, 40), st.sampled_from([5, 10, 25, 30, 50, 70]), st.integers(0, 99)),
        max_size=60,
    ),
    spread=st.booleans(),
)
def test_a_share_joins_the_gpu_a_walk_of_every_mps_gpu_picks(
    nodes: int, steps: list[tuple[int, int, int]], spread: bool
) -> None:
    policy = PlacementPolicy.SPREAD if spread else PlacementPolicy.BINPACK
    spec = GpuplexSpec.model_validate(
        {
            "fleet": {
                "nodes": [
                    {"name": f"n{i}", "gpus": [{"model": "H100-80GB", "count": 2}]}
                    for i in range(nodes)
                ]
            },
            "tenants": [],
        }
    )
    slots = build_inventory(spec.fleet, policy)
    index = FleetIndex(slots, policy, {"t": TENANT})
    (group,) = index.groups
    held: list[Hold] = []
    for number, (memory_gib, threads, release) in enumerate(steps):
        if held and release % 4 == 0:  # now and then a replica leaves
            index.release(held.pop(release % len(held)))
        unit = mps_unit(number, memory_gib, threads)
        expected = scanned_share(index, group, unit, spread)
        candidate = index.search(unit, lambda _: None)
        sized = size_on(unit, slots[0].model)
        assert sized is not None
        joined = [
            c.gpu_ids[0]
            for c in index._candidates(group, unit, sized)
            if c.reason.startswith("shares")
        ]
        assert (joined[0] if joined else None) == expected
        if candidate is not None:
            held.append(index.assign(unit, candidate))


def listed(group: GroupIndex) -> dict[str, object]:
    """Every list a group keeps, as plain values."""
    return {
        "mode_counts": dict(group.mode_counts),
        "empty_mig": list(group.empty_mig),
        "empty_whole": list(group.empty_whole),
        "empty_by_node": {node: list(free) for node, free in group.empty_by_node.items() if free},
        "nodes_by_free": list(group.nodes_by_free),
        "empty_by_kind": {
            for_mig: {kind: list(entries) for kind, entries in kinds.items() if len(entries)}
            for for_mig, kinds in group.empty_by_kind.items()
        },
    }


MIXED_FLEET = {
    "nodes": [
        {"name": "a1", "gpus": [{"model": "H100-80GB", "count": 8}]},
        {"name": "a2", "gpus": [{"model": "H100-80GB", "count": 4, "mig": "on"}]},
        {
            "name": "a3",
            "gpus": [{"model": "H100-80GB", "count": 2, "mig": "off"}],
            "pool": "bursty",
        },
        {"name": "b1", "gpus": [{"model": "A100-40GB", "count": 1}, {"model": "L4", "count": 3}]},
        {"name": "a0", "gpus": [{"model": "H100-80GB", "count": 3}]},
    ]
}


@pytest.mark.parametrize("target", list(Target))
@pytest.mark.parametrize("policy", [PlacementPolicy.BINPACK, PlacementPolicy.SPREAD])
def test_a_new_index_lists_its_gpus_as_adding_them_one_by_one_would(
    target: Target, policy: PlacementPolicy
) -> None:
    spec = GpuplexSpec.model_validate({"fleet": MIXED_FLEET, "tenants": []})
    slots = build_inventory(spec.fleet, policy)
    index = FleetIndex(slots, policy, {}, target=target)
    kinds = None if index.node_sharing is None else index.node_sharing.kinds
    for group in index.groups:
        one_by_one = GroupIndex([index.states[g].slot for g in group.gpu_ids], kinds)
        for gpu_id in group.gpu_ids:
            one_by_one.put_in(index.states[gpu_id])
        assert listed(group) == listed(one_by_one)
        assert listed(group)["empty_mig"] or listed(group)["empty_whole"]
    assert len(index.groups) >= 4


def test_only_empty_gpus_are_listed_all_at_once() -> None:
    spec = GpuplexSpec.model_validate(SPEC)
    slots = build_inventory(spec.fleet, PlacementPolicy.BINPACK)
    index = FleetIndex(slots, PlacementPolicy.BINPACK, {"t": TENANT})
    unit = mps_unit(0, 10, 20)
    candidate = index.search(unit, lambda _: None)
    assert candidate is not None
    index.assign(unit, candidate)
    taken = index.states[candidate.gpu_ids[0]]
    with pytest.raises(ValueError, match="not empty"):
        GroupIndex([taken.slot], None).put_in_empty([taken])
