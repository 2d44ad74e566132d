"""The admission rules case by case: the order across tenants (guaranteed claims, then weighted
DRF), priority inside a queue and its preemption, non-lenders, the capacity held for the first
job short of it, and the reasons a tenant reads."""

from __future__ import annotations

from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import PreemptionRules, QueueNode, QueueTree
from gpuplex.core.spec.queues import WithinQueue
from gpuplex.core.spec.quota_kinds import GPUS


def tree(*tenants: QueueNode, gpus: float = 4.0) -> QueueTree:
    team = QueueNode("team", "team", children=tenants)
    org = QueueNode("org", "organisation", children=(team,))
    cap = {GPUS: gpus}
    return QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=(org,)), cap)


def leaf(name: str, guarantee: float = 0.0, **fields: object) -> QueueNode:
    return QueueNode(name, "tenant", {GPUS: guarantee}, **fields)  # type: ignore[arg-type]


def job(
    job_id: str, tenant: str, gpus: float = 1.0, priority: int = 0, at: float = 0.0
) -> QueuedJob:
    return QueuedJob(job_id, tenant, {GPUS: gpus}, priority, at)


def test_across_tenants_the_lower_weighted_share_goes_first() -> None:
    queues = tree(leaf("a", weight=1.0), leaf("b", weight=3.0), gpus=4.0)
    jobs = [job(f"a{i}", "a", at=float(i)) for i in range(4)]
    jobs += [job(f"b{i}", "b", at=10.0 + i) for i in range(4)]
    decision = admit(queues, [], jobs, now_s=100.0)
    started = set(decision.admitted)
    # a: 1 of 4 GPUs is a share of 0.25 at weight 1; b: 3 of 4 at weight 3 is 0.25 too
    assert len(started) == 4
    assert sum(1 for j in started if j.startswith("b")) == 3


def test_a_guaranteed_claim_goes_before_an_older_borrowers_job() -> None:
    queues = tree(leaf("a", guarantee=1.0), leaf("b"), gpus=1.0)
    decision = admit(queues, [], [job("b0", "b", at=0.0), job("a0", "a", at=5.0)], now_s=10.0)
    assert decision.admitted == ("a0",)
    assert decision.waiting["b0"] == "the cluster is short of 1 GPU for it"


def test_a_higher_priority_job_preempts_its_own_queues_lower_priority_work_only() -> None:
    queues = tree(leaf("a", guarantee=2.0, limit={GPUS: 2.0}), leaf("b"), gpus=4.0)
    running = [
        Holding("a-low", "a", {GPUS: 1.0}, priority=0, started_s=0.0),
        Holding("a-mid", "a", {GPUS: 1.0}, priority=5, started_s=0.0),
        Holding("b-low", "b", {GPUS: 2.0}, priority=-10, started_s=0.0),
    ]
    decision = admit(queues, running, [job("urgent", "a", priority=9)], now_s=1000.0)
    assert [(e.victim, e.for_job) for e in decision.evictions] == [("a-low", "urgent")]
    assert decision.waiting["urgent"] == "preempting a-low for it; it starts when they stop"


def test_within_queue_never_and_min_runtime_protect_running_work() -> None:
    never = PreemptionRules(within_queue=WithinQueue.NEVER)
    queues = tree(leaf("a", guarantee=1.0, limit={GPUS: 1.0}, preemption=never), gpus=4.0)
    running = [Holding("a-low", "a", {GPUS: 1.0}, priority=0, started_s=0.0)]
    decision = admit(queues, running, [job("urgent", "a", priority=9)], now_s=1000.0)
    assert decision.evictions == ()
    young = tree(leaf("a", guarantee=1.0), leaf("b"), gpus=1.0)
    borrowed = [Holding("b0", "b", {GPUS: 1.0}, started_s=990.0)]  # 10 s old, minimum 300 s
    decision = admit(young, borrowed, [job("a0", "a")], now_s=1000.0)
    assert decision.evictions == ()
    assert decision.waiting["a0"].startswith("next to start")


def test_a_non_lenders_idle_guarantee_is_nobody_elses() -> None:
    queues = tree(leaf("a", guarantee=3.0, lends=False), leaf("b"), gpus=4.0)
    decision = admit(queues, [], [job("b0", "b", gpus=2.0)], now_s=0.0)
    assert decision.admitted == ()
    assert decision.waiting["b0"] == (
        "can never start: it asks more than the cluster has beyond what a do not lend: "
        "2 GPUs asked > 1"
    )
    assert admit(queues, [], [job("b1", "b", gpus=1.0)], now_s=0.0).admitted == ("b1",)


def test_the_first_claim_short_of_capacity_has_it_held_and_later_small_ones_wait() -> None:
    patient = PreemptionRules(min_runtime_s=10_000.0)  # nothing old enough to reclaim
    queues = tree(leaf("a", preemption=patient), leaf("b", guarantee=2.0, preemption=patient))
    running = [Holding("x", "a", {GPUS: 3.0}, started_s=0.0)]
    stream = [job("big", "b", gpus=2.0, at=1.0), job("small", "a", at=2.0)]
    decision = admit(queues, running, stream, now_s=10.0)
    assert decision.admitted == ()
    assert decision.waiting["big"] == (
        "next to start: waiting for 1 GPU to free (capacity is held for it)"
    )
    assert decision.waiting["small"] == "the free capacity is held for big, which is ahead of it"


def test_a_borrower_holds_nothing_and_smaller_jobs_pass_it() -> None:
    queues = tree(leaf("a"), leaf("b"), gpus=4.0)
    running = [Holding("x", "a", {GPUS: 3.0}, started_s=0.0)]
    stream = [job("big", "b", gpus=2.0, at=1.0), job("small", "a", at=2.0)]
    decision = admit(queues, running, stream, now_s=10.0)
    assert decision.admitted == ("small",)
    assert decision.waiting["big"] == "the cluster is short of 1 GPU for it"


def test_jobs_of_tenants_without_a_queue_are_told_so() -> None:
    decision = admit(tree(leaf("a")), [], [job("z", "zed")], now_s=0.0)
    assert decision.waiting == {"z": "zed has no queue in queues: it cannot run jobs"}


def test_a_limit_binds_only_the_kinds_it_names() -> None:
    queues = tree(leaf("a", limit={GPUS: 1.0}), gpus=4.0)
    share = QueuedJob("share", "a", {"gpu_memory_gib": 10.0})
    cap = {GPUS: 4.0, "gpu_memory_gib": 320.0}
    queues = QueueTree.of(
        queues.root.__class__("cluster", "cluster", cap, cap, children=queues.root.children), cap
    )
    decision = admit(queues, [], [share, job("two", "a", gpus=2.0, at=1.0)], now_s=0.0)
    assert decision.admitted == ("share",)
    assert (
        decision.waiting["two"] == "can never start: it asks more than a's limit: 2 GPUs asked > 1"
    )
