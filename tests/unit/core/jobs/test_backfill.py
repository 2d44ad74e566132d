"""Backfill with reservations, step by step on two 8-GPU nodes: an 8-GPU job the queues admit but
no node can take gets the node that frees earliest, from when its running jobs' max runtimes end;
1-GPU jobs start around it (elsewhere, or on its free GPUs when they are sure to be gone in
time); it starts when the reserved GPUs free up, and a job no node can take holds no capacity
away from jobs that can be placed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplex.core.jobs.lifecycle import JobRecord, LifecycleStep, step
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import HOLDING_STATES, JobState, ProcessEnd
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.queues.tree import QueueTree, queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec
from tests.unit.core.jobs.test_lifecycle import applied

GRACE_S = 5


def two_nodes_spec(
    tenants: tuple[tuple[str, int], ...] = (("acme", 16),), nodes: int = 2
) -> GpuplexSpec:
    """`nodes` nodes of 8 H100s; each tenant (name, guaranteed GPUs) dedicated, in one team."""
    data: dict[str, Any] = {
        "fleet": {
            "nodes": [
                {"name": f"n{i}", "gpus": [{"model": "H100-80GB", "count": 8, "mig": "off"}]}
                for i in range(nodes)
            ]
        },
        "tenants": [{"name": name, "isolation": "dedicated"} for name, _ in tenants],
        "queues": {
            "preemption": {"min_runtime_s": 0, "grace_s": GRACE_S},
            "organisations": [
                {
                    "name": "org",
                    "teams": [
                        {
                            "name": "team",
                            "tenants": [
                                {"name": name, "guarantee": {"gpus": gpus}}
                                for name, gpus in tenants
                            ],
                        }
                    ],
                }
            ],
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


class Cluster:
    """The store's view of the jobs on a spec, moved by each step; the host runs what starts."""

    def __init__(self, spec: GpuplexSpec) -> None:
        self.spec = spec
        self.plan: Plan = make_plan(spec)
        tree = queue_tree(spec)
        assert tree is not None
        self.tree: QueueTree = tree
        self.jobs: dict[str, JobRecord] = {}
        self.now = 1000.0
        self.last: LifecycleStep | None = None

    def submit(self, job_id: str, gpus: int, tenant: str = "acme", **fields: Any) -> None:
        job = JobSpec(tenant=tenant, gpu={"count": gpus}, command=["train"], **fields)  # type: ignore[arg-type]
        self.jobs[job_id] = JobRecord(job_id, job, JobState.QUEUED, submitted_s=self.now)

    def step(self) -> LifecycleStep:
        result = step(self.spec, self.plan, self.tree, list(self.jobs.values()), self.now)
        for t in result.transitions:
            self.jobs[t.job_id] = applied(self.jobs[t.job_id], t, self.now)
        for job_id, record in self.jobs.items():  # the host starts what was placed
            if record.state is JobState.STARTING:
                self.jobs[job_id] = replace(record, alive=True)
        self.last = result
        return result

    def end(self, *job_ids: str) -> None:
        for job_id in job_ids:
            self.jobs[job_id] = replace(self.jobs[job_id], alive=False, exit_code=0)

    def stop(self, job_id: str) -> None:
        """The host stopped the job's process (SIGTERM)."""
        self.jobs[job_id] = replace(
            self.jobs[job_id], alive=False, exit_code=143, end=ProcessEnd.STOPPED
        )

    def state(self, job_id: str) -> JobState:
        return self.jobs[job_id].state

    def node(self, job_id: str) -> str:
        placement = self.jobs[job_id].placement
        assert placement is not None, job_id
        return placement.node

    def waiting(self, job_id: str) -> str:
        assert self.last is not None
        return self.last.waiting[job_id]

    def running(
        self, job_id: str, node: str, gpu: int, tenant: str = "acme", **fields: Any
    ) -> None:
        """A 1-GPU job already running on `node`'s GPU `gpu`, started now."""
        self.submit(job_id, 1, tenant, **fields)
        placement = Placement(
            tenant=tenant,
            workload=job_workload_name(job_id),
            replica=0,
            mode=Mode.DEDICATED,
            node=node,
            gpu_indices=[gpu],
            gpu_model="H100-80GB",
            memory_mib=81559,
            compute_percent=100,
            reason="placed by the test",
        )
        self.jobs[job_id] = replace(
            self.jobs[job_id],
            state=JobState.RUNNING,
            placement=placement,
            started_s=self.now,
            alive=True,
        )


def half_full(cluster: Cluster) -> None:
    """Four 1-GPU jobs on each node: n0's end within 600 s, n1's within 1200 s."""
    for n in range(4):
        cluster.running(f"short{n}", "n0", n, max_runtime_s=600)
        cluster.running(f"long{n}", "n1", n, max_runtime_s=1200)


def test_an_8_gpu_job_no_node_can_take_is_reserved_the_node_that_frees_first() -> None:
    cluster = Cluster(two_nodes_spec())
    half_full(cluster)
    short_node = "n0"
    cluster.submit("big", 8)
    result = cluster.step()
    assert cluster.state("big") is JobState.QUEUED
    reservation = result.reservation
    assert reservation is not None
    assert reservation.job_id == "big"
    assert reservation.placement.node == short_node
    started = cluster.jobs["short0"].started_s
    assert started is not None
    assert reservation.start_s == started + 600 + GRACE_S
    assert reservation.waiting_for == ("short0", "short1", "short2", "short3")
    why = cluster.waiting("big")
    assert why.startswith(f"no node has room for it now: reserved 8 GPUs on {short_node} from ")
    assert why.endswith("waiting for jobs short0, short1, short2 and 1 more to end")


def test_one_gpu_jobs_backfill_around_the_reservation_and_it_starts_on_time() -> None:
    cluster = Cluster(two_nodes_spec())
    half_full(cluster)
    short_node, other = "n0", "n1"
    cluster.submit("big", 8)
    cluster.step()
    reservation = cluster.last.reservation if cluster.last else None
    assert reservation is not None
    assert reservation.start_s is not None
    # later jobs: four without a max runtime fit on the other node; the fifth would need a
    # reserved GPU and waits; one sure to end before the reservation starts takes a reserved GPU
    for n in range(5):
        cluster.submit(f"fill{n}", 1)
    cluster.submit("quick", 1, max_runtime_s=60)
    cluster.step()
    assert {cluster.node(f"fill{n}") for n in range(4)} == {other}
    assert cluster.state("fill4") is JobState.QUEUED
    assert cluster.node("quick") == short_node
    assert cluster.state("big") is JobState.QUEUED
    # time passes: the quick job ends, then the reserved node's jobs reach their max runtime
    cluster.now += 61
    cluster.end("quick")
    cluster.step()
    assert cluster.state("fill4") is JobState.QUEUED  # a reserved GPU is free, but not for it
    cluster.now = reservation.start_s - GRACE_S
    cluster.step()  # max runtime reached: the runner stops them
    assert all(cluster.state(f"short{n}") is JobState.STOPPING for n in range(4))
    cluster.end(*(f"short{n}" for n in range(4)))
    cluster.step()
    assert cluster.state("big") is JobState.STARTING
    assert cluster.node("big") == short_node
    assert cluster.now <= reservation.start_s
    assert cluster.state("fill4") is JobState.QUEUED  # no GPU is left for it


def test_a_job_no_node_can_take_holds_no_capacity_from_jobs_that_fit() -> None:
    """Before backfill, the queue rules' admission took the 8-GPU job's ask from the room of
    the round it could not be placed in, and the other tenant's job after it waited for nothing."""
    cluster = Cluster(two_nodes_spec(tenants=(("acme", 2), ("globex", 2))))
    for n in range(4):
        cluster.running(f"g{n}", "n0", n, tenant="globex", max_runtime_s=600)
        cluster.running(f"h{n}", "n1", n, tenant="globex", max_runtime_s=600)
    cluster.submit("big", 8)  # acme holds nothing: it comes first, beyond its guarantee
    cluster.submit("g-more", 1, tenant="globex")
    cluster.step()
    assert cluster.state("big") is JobState.QUEUED
    assert cluster.waiting("big").startswith("no GPU has room for it now")
    assert cluster.state("g-more") is JobState.STARTING


def test_a_job_beyond_its_guarantee_gets_no_reservation_and_smaller_jobs_pass_it() -> None:
    cluster = Cluster(two_nodes_spec(tenants=(("acme", 4), ("globex", 12))))
    for n in range(4):
        cluster.running(f"a{n}", "n0", n, max_runtime_s=600)
        cluster.running(f"g{n}", "n1", n, tenant="globex", max_runtime_s=600)
    cluster.submit("big", 8)  # acme holds 4 of its 4: the 8 more borrow
    cluster.submit("small", 1)
    result = cluster.step()
    assert result.reservation is None
    assert cluster.state("big") is JobState.QUEUED
    assert cluster.waiting("big").startswith("no GPU has room for it now")
    assert cluster.state("small") is JobState.STARTING


def test_with_jobs_that_have_no_max_runtime_the_reservation_says_when_is_not_known() -> None:
    cluster = Cluster(two_nodes_spec())
    for n in range(4):
        cluster.running(f"r{n}", "n0", n)
        cluster.running(f"s{n}", "n1", n)
    cluster.submit("big", 8)
    result = cluster.step()
    assert result.reservation is not None
    assert result.reservation.start_s is None
    assert "when is not known" in cluster.waiting("big")
    cluster.submit("brief", 1, max_runtime_s=10)  # nobody knows when the reservation starts
    cluster.step()
    reserved = result.reservation.gpus
    placement = cluster.jobs["brief"].placement
    assert placement is not None
    assert not {(placement.node, i) for i in placement.gpu_indices} & reserved


def test_no_gpu_is_held_twice_while_jobs_backfill() -> None:
    cluster = Cluster(two_nodes_spec())
    half_full(cluster)
    cluster.submit("big", 8)
    for n in range(6):
        cluster.submit(f"fill{n}", 1, max_runtime_s=30 * (n + 1))
    for _ in range(40):
        cluster.now += 30
        for job_id, record in cluster.jobs.items():
            limit = record.job.max_runtime_s
            started = record.started_s
            due = started is not None and limit is not None and cluster.now - started >= limit
            if record.state in HOLDING_STATES and due:
                cluster.end(job_id)
        cluster.step()
        held = [
            (r.placement.node, i)
            for r in cluster.jobs.values()
            if r.state in HOLDING_STATES and r.placement is not None
            for i in r.placement.gpu_indices
        ]
        assert len(held) == len(set(held))
    assert cluster.jobs["big"].started_s is not None
