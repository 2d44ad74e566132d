"""What a host runs while jobs run: the applied revision plus each live job as one replica, on the
GPU views too (the MIG slices and MPS daemons the host creates for them), with its queue's grace
as its stop grace; a second MIG job goes beside a running one, whose slice stays where it is."""

from __future__ import annotations

from gpuplex.core.apply.desired import desired_host
from gpuplex.core.jobs.live import LiveJob, live_revision
from gpuplex.core.jobs.placement import job_workload_name, place_jobs
from gpuplex.core.plan import make_plan
from gpuplex.core.plan.model import Mode
from gpuplex.core.queues.tree import queue_tree
from tests.unit.core.jobs.test_job_placement import job, spec


def test_a_running_mig_job_keeps_its_slice_as_a_second_one_is_placed_beside_it() -> None:
    applied = spec()
    plan = make_plan(applied)
    tree = queue_tree(applied)
    first = place_jobs(applied, plan, {}, {"m1": job("adatum", mig_profile="3g.40gb")}, {})
    m1 = first.placed["m1"]
    second = place_jobs(
        applied,
        first.plan,
        {"m1": job("adatum", mig_profile="3g.40gb")},
        {"m2": job("adatum", mig_profile="3g.40gb")},
        {},
    )
    m2 = second.placed["m2"]
    assert (m2.node, m2.gpu_indices) == (m1.node, m1.gpu_indices)  # the same A100
    assert m1.mig is not None
    assert m2.mig is not None
    assert m2.mig.start_slot != m1.mig.start_slot

    jobs = [
        LiveJob("m1", job("adatum", mig_profile="3g.40gb"), m1),
        LiveJob("m2", job("adatum", mig_profile="3g.40gb"), m2),
    ]
    run_spec, run_plan = live_revision(applied, plan, tree, jobs)
    host = desired_host(run_spec, run_plan, m1.node)
    (gpu,) = [g for g in host.gpus if g.index == m1.gpu_indices[0]]
    assert gpu.mig_slices is not None
    assert sorted(s.start_slot for s in gpu.mig_slices) == sorted(
        [m1.mig.start_slot, m2.mig.start_slot]
    )
    units = {w.workload: w for w in host.workloads}
    assert set(units) == {job_workload_name("m1"), job_workload_name("m2")}
    assert units[job_workload_name("m1")].binding.mig == m1.mig  # the slice as it was placed
    assert units[job_workload_name("m1")].restart.policy.value == "never"
    assert units[job_workload_name("m1")].restart.stop_grace_s == 30  # the queues' default grace


def test_without_jobs_the_host_runs_the_revision_as_applied() -> None:
    applied = spec()
    plan = make_plan(applied)
    run_spec, run_plan = live_revision(applied, plan, queue_tree(applied), [])
    assert run_plan == plan
    assert desired_host(run_spec, run_plan, "n0") == desired_host(applied, plan, "n0")
    assert all(p.mode is Mode.DEDICATED for p in run_plan.placements)
