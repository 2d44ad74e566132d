"""diff over GPUs: MIG reshaping, MIG mode, lost GPUs, MPS daemons."""

from __future__ import annotations

import pytest

from gpuplex.core.apply.actions import Blocked, CreateMigInstance, DestroyMigInstance
from gpuplex.core.apply.diff import HostObservation, diff, mig_key
from gpuplex.core.apply.model import GpuStatus, Phase
from gpuplex.core.plan.model import Mode
from tests.unit.core.apply.factories import (
    binding,
    gpu_desired,
    gpu_status,
    host,
    instance,
    mig_slice,
    observe,
    record,
    settled,
    summary,
    wanted,
)

S3_0, S3_4 = mig_slice("3g.40gb", 0), mig_slice("3g.40gb", 4)
S2_4, S1_6 = mig_slice("2g.20gb", 4), mig_slice("1g.20gb", 6)
S1_0 = mig_slice("1g.10gb", 0)


def test_fresh_host_creates_slices_and_starts_daemons_before_replicas() -> None:
    a = wanted("a", binding(Mode.MIG, 0, mig=S3_4, memory_mib=40320))
    b = wanted("b", binding(Mode.MIG, 0, mig=S1_0, memory_mib=9984))
    c = wanted("c", binding(Mode.MPS, 1, memory_mib=4096, thread_percent=30))
    d = wanted("d", binding(Mode.DEDICATED, 2))
    desired = host(
        [gpu_desired(0, mig=[S1_0, S3_4]), gpu_desired(1, mps=True), gpu_desired(2)], [a, b, c, d]
    )
    seen = observe([gpu_status(0, mig_enabled=True), gpu_status(1), gpu_status(2)])
    assert summary(diff(desired, seen, 0.0)) == [
        ("create", 0, "3g.40gb@4"),  # larger first
        ("create", 0, "1g.10gb@0"),
        ("mps", 1),
        ("start", "acme/a#0"),
        ("start", "acme/b#0"),
        ("start", "acme/c#0"),
        ("start", "acme/d#0"),
    ]


# Plan A: GPU 0 holds 3g.40gb@0 and 3g.40gb@4, GPU 1 one 1g.10gb@0. Plan B keeps GPU 1 and the
# first slice of GPU 0, and cuts GPU 0's second half into 2g.20gb@4 and 1g.20gb@6.
KEPT = wanted("kept", binding(Mode.MIG, 0, mig=S3_0, memory_mib=40320))
HALF = wanted("half", binding(Mode.MIG, 0, mig=S3_4, memory_mib=40320))
OTHER = wanted("other", binding(Mode.MIG, 1, mig=S1_0, memory_mib=9984))
TWO = wanted("two", binding(Mode.MIG, 0, mig=S2_4, memory_mib=20096))
ONE = wanted("one", binding(Mode.MIG, 0, mig=S1_6, memory_mib=20096))
PLAN_A = host([gpu_desired(0, mig=[S3_0, S3_4]), gpu_desired(1, mig=[S1_0])], [KEPT, HALF, OTHER])
PLAN_B = host(
    [gpu_desired(0, mig=[S3_0, S2_4, S1_6]), gpu_desired(1, mig=[S1_0])], [KEPT, OTHER, TWO, ONE]
)


def plan_a_running(**update: object) -> HostObservation:
    seen = settled(PLAN_A, [record(KEPT), record(HALF), record(OTHER)])
    users = {"MIG-0-1": [KEPT.label], "MIG-0-2": [HALF.label], "MIG-1-1": [OTHER.label]}
    return seen.model_copy(update={"device_users": users, **update})


def test_a_new_layout_reshapes_only_the_gpu_that_changed() -> None:
    actions = diff(PLAN_B, plan_a_running(), 0.0)
    assert summary(actions) == [
        ("stop", HALF.label, False),
        ("destroy", 0, "3g.40gb@4"),
        ("create", 0, "2g.20gb@4"),
        ("create", 0, "1g.20gb@6"),
        ("start", TWO.label),
        ("start", ONE.label),
    ]
    destroy = actions[1]
    assert isinstance(destroy, DestroyMigInstance)
    assert (destroy.gi_id, destroy.reason) == (2, "not in the plan")
    for action in actions:
        if isinstance(action, DestroyMigInstance | CreateMigInstance):
            assert action.gpu_index == 0


def test_an_instance_in_use_by_someone_else_is_never_destroyed() -> None:
    users = {"MIG-0-1": [KEPT.label], "MIG-0-2": [HALF.label, "pid 77 (not gpuplex's)"]}
    actions = diff(PLAN_B, plan_a_running(device_users=users), 0.0)
    assert summary(actions) == [
        ("stop", HALF.label, False),
        ("blocked", "GPU 0"),
        ("blocked", TWO.label),
        ("blocked", ONE.label),
    ]
    gpu_block = actions[1]
    assert isinstance(gpu_block, Blocked)
    assert "3g.40gb@4 used by pid 77 (not gpuplex's)" in gpu_block.reason
    assert HALF.label not in gpu_block.reason  # it is being stopped: not in the way


def test_instances_gpuplex_did_not_create_are_left_alone_unless_in_the_way() -> None:
    foreign = [instance(0, S3_0, 1), instance(0, S3_4, 2)]
    desired = host([gpu_desired(0, mig=[S3_0])], [KEPT])
    seen = observe([gpu_status(0, mig_enabled=True, instances=foreign)], [record(KEPT)])
    assert diff(desired, seen, 0.0) == []  # 3g.40gb@4 is not ours and not in the way

    desired = host([gpu_desired(0, mig=[S3_0, S2_4])], [KEPT, TWO])
    actions = diff(desired, seen, 0.0)
    assert summary(actions) == [
        ("destroy", 0, "3g.40gb@4"),
        ("create", 0, "2g.20gb@4"),
        ("start", TWO.label),
    ]
    assert isinstance(actions[0], DestroyMigInstance)
    assert actions[0].reason == "in the way of a planned slice"


def test_owned_instances_not_planned_are_destroyed_when_free() -> None:
    desired = host([gpu_desired(0, mig=[S3_0])], [KEPT])
    seen = observe(
        [gpu_status(0, mig_enabled=True, instances=[instance(0, S3_0, 1), instance(0, S3_4, 2)])],
        [record(KEPT)],
        owned={0: [mig_key("3g.40gb", 0), mig_key("3g.40gb", 4)]},
    )
    assert summary(diff(desired, seen, 0.0)) == [("destroy", 0, "3g.40gb@4")]


def test_mig_mode_off_blocks_the_gpu_with_the_command_to_run() -> None:
    sliced = wanted("sliced", binding(Mode.MIG, 3, mig=S3_0, memory_mib=40320))
    whole = wanted("w", binding(Mode.DEDICATED, 4))
    desired = host([gpu_desired(3, mig=[S3_0]), gpu_desired(4)], [sliced, whole])
    actions = diff(desired, observe([gpu_status(3), gpu_status(4)]), 0.0)
    assert summary(actions) == [
        ("blocked", "GPU 3"),
        ("blocked", sliced.label),
        ("start", "acme/w#0"),
    ]
    for action in actions[:2]:
        assert isinstance(action, Blocked)
        assert "`gpuplex host mig-mode 3 on`" in action.reason


def test_mig_mode_on_but_planned_whole_is_blocked() -> None:
    desired = host([gpu_desired(0)], [wanted("w", binding(Mode.TIMESLICE, 0))])
    [gpu_block, replica_block] = diff(desired, observe([gpu_status(0, mig_enabled=True)]), 0.0)
    assert isinstance(gpu_block, Blocked)
    assert "`gpuplex host mig-mode 0 off`" in gpu_block.reason
    assert replica_block == Blocked(target="acme/w#0", reason=gpu_block.reason)


@pytest.mark.parametrize("status", [gpu_status(1, lost=True), None], ids=["lost", "absent"])
def test_a_lost_gpu_stops_and_blocks_its_replicas_only(status: GpuStatus | None) -> None:
    here = wanted("here", binding(Mode.DEDICATED, 0))
    gone = wanted("gone", binding(Mode.TIMESLICE, 1))
    also = wanted("gone", binding(Mode.TIMESLICE, 1), replica=1)
    desired = host([gpu_desired(0), gpu_desired(1)], [here, gone, also])
    statuses = [gpu_status(0)] + ([status] if status is not None else [])
    seen = observe(statuses, [record(here), record(gone), record(also, Phase.BACKOFF)])
    assert summary(diff(desired, seen, 1e9)) == [
        ("blocked", "GPU 1"),
        ("stop", gone.label, False),
        ("blocked", gone.label),
        ("blocked", also.label),
    ]


def test_a_replica_already_told_it_is_blocked_is_not_told_again() -> None:
    desired = host([gpu_desired(1)], [gone := wanted("gone", binding(Mode.TIMESLICE, 1))])
    seen = observe([gpu_status(1, lost=True)])
    [gpu_block, _] = diff(desired, seen, 0.0)
    assert isinstance(gpu_block, Blocked)
    told = record(gone, Phase.BACKOFF, next_start_at_s=0.0, message=gpu_block.reason)
    seen = seen.model_copy(update={"records": [told]})
    assert summary(diff(desired, seen, 0.0)) == [("blocked", "GPU 1")]


def test_a_dead_mps_daemon_restarts_with_only_its_own_clients() -> None:
    mine = [wanted("c", binding(Mode.MPS, 1, thread_percent=20), replica=r) for r in (0, 1)]
    theirs = wanted("d", binding(Mode.MPS, 2, thread_percent=20))
    desired = host([gpu_desired(1, mps=True), gpu_desired(2, mps=True)], [*mine, theirs])
    seen = settled(desired, [record(w) for w in [*mine, theirs]]).model_copy(
        update={"mps_alive": {1: False, 2: True}}
    )
    assert summary(diff(desired, seen, 0.0)) == [
        ("stop", "acme/c#0", False),
        ("stop", "acme/c#1", False),
        ("mps", 1),
        ("start", "acme/c#0"),
        ("start", "acme/c#1"),
    ]


def test_an_unneeded_mps_daemon_is_stopped() -> None:
    desired = host([gpu_desired(1)], [])
    seen = observe([gpu_status(1)], mps_alive={1: True})
    assert summary(diff(desired, seen, 0.0)) == [("mps-stop", 1)]


def test_a_gpu_blocked_for_its_mig_mode_still_sheds_gpuplex_instances() -> None:
    whole = wanted("w", binding(Mode.TIMESLICE, 0))
    desired = host([gpu_desired(0)], [whole])
    made = [instance(0, S3_0, 1), instance(0, S3_4, 2)]
    seen = observe(
        [gpu_status(0, mig_enabled=True, instances=made)],
        owned={0: [mig_key("3g.40gb", 4)]},  # 3g.40gb@0 is the operator's
    )
    assert summary(diff(desired, seen, 0.0)) == [
        ("blocked", "GPU 0"),
        ("destroy", 0, "3g.40gb@4"),
        ("blocked", whole.label),
    ]


def test_a_lost_gpu_is_not_reshaped() -> None:
    desired = host([gpu_desired(0, mig=[S1_0])], [])
    seen = observe(
        [gpu_status(0, mig_enabled=True, lost=True, instances=[instance(0, S3_4, 1)])],
        owned={0: [mig_key("3g.40gb", 4)]},
    )
    assert summary(diff(desired, seen, 0.0)) == [("blocked", "GPU 0")]
