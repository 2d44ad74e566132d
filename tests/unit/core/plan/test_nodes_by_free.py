"""A replica of several whole GPUs finds its node by bisection over the nodes sorted by free GPUs
(`GroupIndex.nodes_by_free`), not by a scan of every node. It must pick what that scan picked:
under binpack the node with the fewest free GPUs that fit, under spread the most, ties to the node
whose first free GPU comes first. Checked against the scan over random runs of placements and
releases of 1- to 8-GPU replicas, on a fleet whose nodes differ in size."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from gpuplex.core.plan.demand import Unit
from gpuplex.core.plan.index import FleetIndex, GroupIndex
from gpuplex.core.plan.inventory import build_inventory
from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.occupancy import Hold
from gpuplex.core.spec import GpuplexSpec, PlacementPolicy, TenantSpec

TENANT = TenantSpec.model_validate({"name": "t", "workloads": []})


def fleet_of(sizes: list[int]) -> GpuplexSpec:
    nodes = [
        {"name": f"n{i}", "gpus": [{"model": "H100-80GB", "count": size}]}
        for i, size in enumerate(sizes)
    ]
    return GpuplexSpec.model_validate({"fleet": {"nodes": nodes}, "tenants": []})


def dedicated(number: int, gpus: int) -> Unit:
    return Unit(("t", "w", number), TENANT, Mode.DEDICATED, None, gpus, None, None, None, None)


def scanned(group: GroupIndex, need: int, spread: bool) -> str | None:
    """The node the planner picked before the index: a scan of every node's free GPUs."""
    fitting = [(node, free) for node, free in group.empty_by_node.items() if len(free) >= need]
    if not fitting:
        return None
    sign = -1 if spread else 1
    return min(fitting, key=lambda item: (sign * len(item[1]), item[1][0][0]))[0]


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=8),
    steps=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 1_000)), max_size=40),
    spread=st.booleans(),
)
def test_the_indexed_node_is_the_one_a_scan_of_every_node_picks(
    sizes: list[int], steps: list[tuple[int, int]], spread: bool
) -> None:
    policy = PlacementPolicy.SPREAD if spread else PlacementPolicy.BINPACK
    slots = build_inventory(fleet_of(sizes).fleet, policy)
    index = FleetIndex(slots, policy, {"t": TENANT})
    (group,) = index.groups
    held: list[Hold] = []
    for number, (gpus, release) in enumerate(steps):
        if held and release % 3 == 0:  # now and then a replica leaves
            index.release(held.pop(release % len(held)))
        unit = dedicated(number, gpus)
        expected = scanned(group, gpus, spread) if gpus > 1 else None
        candidate = index.search(unit, lambda _: None)
        if gpus > 1:
            got = None if candidate is None else slots[candidate.gpu_ids[0]].node
            assert got == expected
        assert sorted(group.nodes_by_free) == group.nodes_by_free
        assert {node for _, _, node in group.nodes_by_free} == {
            node for node, free in group.empty_by_node.items() if free
        }
        if candidate is not None:
            held.append(index.assign(unit, candidate))
