"""Placement behaviour: binpack vs spread, pools, co-tenancy, quotas, preemption, re-planning."""

from __future__ import annotations

from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import validate_spec
from tests.unit.core.plan.factories import fleet, spec, tenant, workload
from tests.unit.core.plan.invariants import plan_violations

H100 = {"model": "H100-80GB", "count": 4}


def gpus_of(plan: Plan, label: str) -> list[tuple[str, int]]:
    return [
        (p.node, i) for p in plan.placements if p.label().startswith(label) for i in p.gpu_indices
    ]


def test_binpack_fills_one_gpu_and_spread_uses_many() -> None:
    shares = tenant("t", workload("w", {"memory_gib": 10}, replicas=4), isolation="mps")
    packed = make_plan(spec(fleet(H100), shares))
    spread = make_plan(spec(fleet(H100), shares, policy={"placement": "spread"}))
    assert packed.summary.gpus_used == 1
    assert spread.summary.gpus_used == 4


def test_spread_interleaves_nodes_for_dedicated_gpus() -> None:
    whole = tenant("t", workload("w", {"count": 1}, replicas=2))
    plan = make_plan(spec(fleet(H100, nodes=2), whole, policy={"placement": "spread"}))
    assert {node for node, _ in gpus_of(plan, "t/w")} == {"n0", "n1"}


def test_multi_gpu_replica_stays_on_one_node() -> None:
    first = tenant("a", workload("w", {"count": 1}))
    big = tenant("b", workload("w", {"count": 4}))
    plan = make_plan(spec(fleet(H100, nodes=2), first, big))
    nodes = {node for node, _ in gpus_of(plan, "b/w")}
    assert len(nodes) == 1
    assert len(gpus_of(plan, "b/w")) == 4


def test_bursty_work_stays_out_of_the_long_running_pool() -> None:
    fleet_spec = {
        "nodes": [
            {"name": "steady", "pool": "long-running", "gpus": [{"model": "L4", "count": 1}]},
            {"name": "spiky", "pool": "bursty", "gpus": [{"model": "L4", "count": 1}]},
        ]
    }
    bursty = tenant("t", workload("w", {"count": 1}, pattern="bursty", replicas=2))
    plan = make_plan(spec(fleet_spec, bursty))
    assert gpus_of(plan, "t/w") == [("spiky", 0)]
    assert len(plan.infeasible) == 1
    assert any("in pool long-running" in r for r in plan.infeasible[0].reasons)


def test_exclusive_and_never_share_with_keep_tenants_apart() -> None:
    lone = tenant("lone", workload("w", {"memory_gib": 5}), isolation="mps", exclusive_gpus=True)
    other = tenant("other", workload("w", {"memory_gib": 5}), isolation="mps")
    rival = tenant(
        "rival", workload("w", {"memory_gib": 5}), isolation="mps", never_share_with=["other"]
    )
    plan = make_plan(spec(fleet({"model": "L4", "count": 3}), lone, other, rival))
    assert len({gpu for label in ("lone", "other", "rival") for gpu in gpus_of(plan, label)}) == 3
    assert plan_violations(spec(fleet({"model": "L4", "count": 3}), lone, other, rival), plan) == []


def test_quota_stops_placement_with_the_reason() -> None:
    capped = tenant(
        "t",
        workload("w", {"mig_profile": "3g.40gb"}, replicas=3),
        isolation="mig",
        quota={"mig": {"3g.40gb": 2}},
    )
    plan = make_plan(spec(fleet(H100), capped))
    assert plan.summary.replicas_placed == 2
    assert plan.infeasible[0].reasons == [
        "quota mig 3g.40gb: would hold 3, quota 2: w 2 replicas hold 2 x 3g.40gb, "
        "a replica of w would add 1 x 3g.40gb"
    ]


def test_a_memory_quota_refusal_names_the_workloads_held_and_the_rounded_up_ask() -> None:
    chat = workload("chat", {"memory_gib": 30}, replicas=3)
    embed = workload("embed", {"memory_gib": 8})
    capped = tenant("t", chat, embed, isolation="mig", quota={"gpu_memory_gib": 80})
    plan = make_plan(spec(fleet(H100), capped))
    reasons = {i.label(): i.reasons for i in plan.infeasible}
    assert reasons == {
        "t/chat#2": [
            "quota gpu_memory_gib: would hold 118.1 GiB, quota 80: chat 2 replicas hold 78.8 GiB, "
            "a replica of chat would add 39.4 GiB (asked 30)"
        ],
        "t/embed#0": [
            "quota gpu_memory_gib: would hold 88.5 GiB, quota 80: chat 2 replicas hold 78.8 GiB, "
            "a replica of embed would add 9.8 GiB (asked 8)"
        ],
    }


def test_memory_request_gets_the_smallest_mig_profile_that_holds_it() -> None:
    plan = make_plan(
        spec(fleet(H100), tenant("t", workload("w", {"memory_gib": 15}), isolation="mig"))
    )
    assert plan.placements[0].mig is not None
    assert plan.placements[0].mig.profile == "1g.20gb"


def test_preemption_evicts_the_fewest_lower_priority_replicas() -> None:
    base = fleet({"model": "H100-80GB", "count": 1})
    low = tenant(
        "low",
        workload("small", {"mig_profile": "1g.10gb"}, replicas=3),
        isolation="mig",
        priority=0,
    )
    low_big = tenant(
        "low-big", workload("big", {"mig_profile": "3g.40gb"}), isolation="mig", priority=0
    )
    current = make_plan(spec(base, low, low_big))
    assert current.summary.replicas_placed == 4
    high = tenant("high", workload("w", {"mig_profile": "3g.40gb"}), isolation="mig", priority=10)
    plan = make_plan(spec(base, low, low_big, high), current)
    assert [p.label() for p in plan.placements if p.tenant == "high"] == ["high/w#0"]
    assert len(plan.preemptions) == 1  # one 3g.40gb evicted, not three 1g.10gb
    assert plan.preemptions[0].tenant == "low-big"
    assert plan.preemptions[0].by == "high/w#0"


def test_no_preemption_when_the_policy_is_off() -> None:
    base = fleet({"model": "L4", "count": 1})
    low = tenant("low", workload("w", {"count": 1}), priority=0)
    current = make_plan(spec(base, low))
    high = tenant("high", workload("w", {"count": 1}), priority=5)
    plan = make_plan(spec(base, low, high, policy={"preemption": False}), current)
    assert plan.preemptions == []
    assert [i.tenant for i in plan.infeasible] == ["high"]


def test_replanning_keeps_placements_and_reports_only_changed_mig_geometry() -> None:
    t = tenant(
        "t",
        workload("a", {"mig_profile": "3g.40gb"}),
        workload("b", {"mig_profile": "2g.20gb"}),
        isolation="mig",
    )
    current = make_plan(spec(fleet(H100), t))
    grown = tenant(
        "t",
        workload("a", {"mig_profile": "3g.40gb"}),
        workload("b", {"mig_profile": "2g.20gb"}),
        workload("c", {"mig_profile": "7g.80gb"}),
        isolation="mig",
    )
    plan = make_plan(spec(fleet(H100), grown), current)
    assert plan.moves == []
    kept = {p.label(): (p.node, p.gpu_indices, p.mig) for p in current.placements}
    assert all(
        kept[p.label()] == (p.node, p.gpu_indices, p.mig)
        for p in plan.placements
        if p.label() in kept
    )
    changed = [(r.node, r.gpu_index) for r in plan.mig_reconfigurations]
    assert changed == [("n0", 1)]  # only the GPU that gains the 7g.80gb


def test_a_removed_gpu_moves_its_replica() -> None:
    two = spec(
        fleet({"model": "L4", "count": 2}), tenant("t", workload("w", {"count": 1}, replicas=2))
    )
    current = make_plan(two)
    one_left = spec(
        {
            "nodes": [
                {"name": "n0", "gpus": [{"model": "L4", "count": 1}]},
                {"name": "n1", "gpus": [{"model": "L4", "count": 1}]},
            ]
        },
        tenant("t", workload("w", {"count": 1}, replicas=2)),
    )
    plan = make_plan(one_left, current)
    assert [m.label() for m in plan.moves] == ["t/w#1"]
    assert plan.moves[0].to_node == "n1"


def test_no_eviction_for_a_replica_its_own_quota_refuses() -> None:
    base = fleet({"model": "L4", "count": 1})
    low = tenant("low", workload("w", {"count": 1}), priority=0)
    current = make_plan(spec(base, low))
    capped = tenant("high", workload("w", {"count": 1}), priority=9, quota={"gpus": 0})
    plan = make_plan(spec(base, low, capped), current)
    assert plan.preemptions == []
    assert [p.label() for p in plan.placements] == ["low/w#0"]
    assert plan.infeasible[0].reasons == [
        "quota gpus: would hold 1 whole GPUs, quota 0: a replica of w would add 1 GPU"
    ]


def test_current_mig_slice_is_not_kept_on_a_gpu_now_mig_off() -> None:
    t = tenant("t", workload("w", {"mig_profile": "1g.10gb"}), isolation="mig")
    current = make_plan(spec(fleet({"model": "H100-80GB", "count": 2}), t))
    assert current.placements[0].gpu_indices == [0]
    node = {"name": "n0", "gpus": [{"model": "H100-80GB", "mig": "off"}, {"model": "H100-80GB"}]}
    plan = make_plan(spec({"nodes": [node]}, t), current)
    assert plan.placements[0].gpu_indices == [1]
    assert [m.label() for m in plan.moves] == ["t/w#0"]


def test_current_placement_is_not_kept_when_the_gpu_model_changed() -> None:
    t = tenant("t", workload("w", {"mig_profile": "3g.40gb"}), isolation="mig")
    current = make_plan(spec(fleet({"model": "H100-80GB", "count": 1}), t))
    plan = make_plan(spec(fleet({"model": "A100-80GB", "count": 1}), t), current)
    assert plan.placements[0].gpu_model == "A100-80GB"
    assert plan.placements[0].reason != "kept where the current plan has it"
    assert [(r.node, r.gpu_index) for r in plan.mig_reconfigurations] == [("n0", 0)]


def test_lora_adapter_gets_its_base_servers_mode() -> None:
    owner = tenant(
        "owner",
        workload(
            "base", {"mig_profile": "3g.40gb"}, serve={"model": "b", "accepts_adapters": True}
        ),
        isolation="mig",
    )
    rider = tenant("rider", workload("lora", serve={"model": "r", "lora_of": "owner/base"}))
    plan = make_plan(spec(fleet(H100), owner, rider))
    decision = next(d for d in plan.decisions if d.tenant == "rider")
    assert decision.mode == "mig"
    assert "owner/base" in decision.reason


def test_gpu_model_pins_every_replica_to_that_model() -> None:
    mixed = {
        "nodes": [
            {"name": "h", "gpus": [{"model": "H100-80GB", "count": 1}]},
            {"name": "a", "gpus": [{"model": "A100-80GB", "count": 4}]},
        ]
    }
    sweep = tenant("t", workload("sweep", {"count": 1, "model": "A100-80GB"}, replicas=3))
    plan = make_plan(spec(mixed, sweep))
    assert {p.gpu_model for p in plan.placements} == {"A100-80GB"}
    too_many = tenant("t", workload("sweep", {"count": 1, "model": "H100-80GB"}, replicas=2))
    short = make_plan(spec(mixed, too_many))
    assert short.summary.replicas_placed == 1
    assert (
        "4 GPUs: model A100-80GB; this workload asks for H100-80GB" in short.infeasible[0].reasons
    )


def test_auto_on_a_pool_that_is_all_mig_takes_a_slice() -> None:
    all_mig = fleet({"model": "H100-80GB", "count": 1, "mig": "on"})
    free_tier = tenant("t", workload("w", {"memory_gib": 8}), tier="free")
    plan = make_plan(spec(all_mig, free_tier))
    assert plan.decisions[0].mode == "mig"
    assert "every GPU in the pool has mig: on" in plan.decisions[0].reason
    assert plan.summary.replicas_placed == 1


def test_a_current_plan_that_repeats_a_gpu_is_not_kept() -> None:
    two = fleet({"model": "L4", "count": 2})
    big = tenant("a", workload("big", {"count": 2}), priority=0)
    current = make_plan(spec(two, big))
    placed = current.placements[0]
    edited = current.model_copy(
        update={"placements": [placed.model_copy(update={"gpu_indices": [0, 0]})]}
    )
    rival = tenant("b", workload("w", {"count": 1}), priority=5)
    plan = make_plan(spec(two, big, rival), edited)
    assert plan_violations(spec(two, big, rival), plan) == []
    assert all(len(set(p.gpu_indices)) == len(p.gpu_indices) for p in plan.placements)


def test_whole_gpus_combine_across_mig_auto_and_off_on_one_node() -> None:
    node = {
        "name": "n0",
        "gpus": [{"model": "H100-80GB", "mig": "auto"}, {"model": "H100-80GB", "mig": "off"}],
    }
    pair = tenant("t", workload("w", {"count": 2}))
    mixed = spec({"nodes": [node]}, pair)
    assert validate_spec(mixed.model_dump(mode="json")) == mixed
    plan = make_plan(mixed)
    assert [p.gpu_indices for p in plan.placements] == [[0, 1]]


def test_a_new_slice_on_the_same_gpu_is_a_move() -> None:
    one = fleet({"model": "H100-80GB", "count": 1, "mig": "on"})
    small = tenant("t", workload("w", {"mig_profile": "1g.10gb"}), isolation="mig")
    current = make_plan(spec(one, small))
    grown = tenant("t", workload("w", {"mig_profile": "3g.40gb"}), isolation="mig")
    plan = make_plan(spec(one, grown), current)
    assert [m.label() for m in plan.moves] == ["t/w#0"]
    move = plan.moves[0]
    assert (move.from_node, move.from_gpu_indices) == (move.to_node, move.to_gpu_indices)
    assert move.from_mig is not None
    assert move.to_mig is not None
    assert (move.from_mig.profile, move.to_mig.profile) == ("1g.10gb", "3g.40gb")
