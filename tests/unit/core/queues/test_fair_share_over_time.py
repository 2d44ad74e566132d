"""Fair share over time: above the guarantees, a tenant that used much recently yields to one that
used little; its past usage fades with the tree's half-life; guarantees ignore the past; a
half-life of 0 (or no usage given) orders by what each tenant holds now."""

from __future__ import annotations

from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.queues.usage import UsageInterval, decayed_usage
from gpuplex.core.spec.quota_kinds import GPUS

DAY_S = 86_400.0


def tree(half_life_s: float, *, a_guarantee: float = 0.0, gpus: float = 4.0) -> QueueTree:
    tenants = (
        QueueNode("a", "tenant", {GPUS: a_guarantee}),
        QueueNode("b", "tenant", {}),
    )
    cap = {GPUS: gpus}
    return QueueTree.of(
        QueueNode("cluster", "cluster", cap, cap, children=tenants), cap, half_life_s
    )


#: three of the four GPUs held by a third party (a replica of nobody's queue), one free
BUSY = [Holding("replica", "other", {GPUS: 3.0}, preemptible=False)]
#: a's job has waited longer
QUEUED = [
    QueuedJob("a-job", "a", {GPUS: 1.0}, submitted_s=0.0),
    QueuedJob("b-job", "b", {GPUS: 1.0}, submitted_s=50.0),
]


def yesterday(tenant: str, gpus: float) -> dict[str, dict[str, float]]:
    """`tenant` held `gpus` all of yesterday; now is 100 s into today."""
    used = [UsageInterval(tenant, {GPUS: gpus}, -DAY_S, 0.0)]
    return decayed_usage(used, 100.0, DAY_S)


def test_a_tenant_that_used_much_yesterday_yields_to_one_that_used_nothing() -> None:
    decision = admit(tree(DAY_S), BUSY, QUEUED, now_s=100.0, usage=yesterday("a", 4.0))
    assert decision.admitted == ("b-job",)
    assert decision.waiting["a-job"] == "the cluster is short of 1 GPU for it"
    # without the history, the older job goes first
    assert admit(tree(DAY_S), BUSY, QUEUED, now_s=100.0).admitted == ("a-job",)


def test_with_a_half_life_of_zero_only_what_is_held_now_counts() -> None:
    decision = admit(tree(0.0), BUSY, QUEUED, now_s=100.0, usage=yesterday("a", 4.0))
    assert decision.admitted == ("a-job",)


def test_past_usage_fades_so_a_week_old_burst_no_longer_counts_against_a_small_recent_one() -> None:
    half_life = 3600.0
    used = [
        UsageInterval("a", {GPUS: 4.0}, -7 * DAY_S, -6 * DAY_S),  # a big week-old burst
        UsageInterval("b", {GPUS: 1.0}, -600.0, 0.0),  # ten minutes of one GPU just now
    ]
    usage = decayed_usage(used, 100.0, half_life)
    assert admit(tree(half_life), BUSY, QUEUED, now_s=100.0, usage=usage).admitted == ("a-job",)
    # the same burst yesterday afternoon still counts
    recent = [UsageInterval("a", {GPUS: 4.0}, -3 * 3600.0, -2 * 3600.0), used[1]]
    usage = decayed_usage(recent, 100.0, half_life)
    assert admit(tree(half_life), BUSY, QUEUED, now_s=100.0, usage=usage).admitted == ("b-job",)


def test_a_claim_inside_its_guarantee_goes_first_whatever_it_used() -> None:
    decision = admit(
        tree(DAY_S, a_guarantee=1.0), BUSY, QUEUED, now_s=100.0, usage=yesterday("a", 4.0)
    )
    assert decision.admitted == ("a-job",)


def test_within_a_round_the_jobs_started_count_so_one_tenant_does_not_take_everything() -> None:
    """Nobody used anything yet and four GPUs are free: weights 1 and 3 share them 1:3."""
    tenants = (
        QueueNode("a", "tenant", {}, weight=1.0),
        QueueNode("b", "tenant", {}, weight=3.0),
    )
    cap = {GPUS: 4.0}
    weighted = QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=tenants), cap)
    jobs = [QueuedJob(f"a{i}", "a", {GPUS: 1.0}, submitted_s=float(i)) for i in range(4)]
    jobs += [QueuedJob(f"b{i}", "b", {GPUS: 1.0}, submitted_s=10.0 + i) for i in range(4)]
    decision = admit(weighted, [], jobs, now_s=0.0, usage={})
    assert sorted(decision.admitted) == ["a0", "b0", "b1", "b2"]
