"""A job's replica is marked as one by its type (`JobWorkloadSpec`), not by its name: it always runs
in a network namespace of its own, a process or a container, whatever network its file or a
workload's fields say; a workload of the spec named like a job is not one. Validation refuses such
a name now (`job-` is reserved), but a revision applied before it was may still hold one."""

from __future__ import annotations

from typing import Any

from gpuplex.core.apply.desired import desired_host
from gpuplex.core.apply.launch import container_argv, own_network, process_argv
from gpuplex.core.jobs.live import LiveJob, live_revision
from gpuplex.core.plan import make_plan
from gpuplex.core.plan.model import Mode
from gpuplex.core.queues.tree import queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec, JobWorkloadSpec
from gpuplex.core.spec.runtime import Network
from tests.unit.core.apply.factories import binding, wanted


def spec() -> GpuplexSpec:
    lookalike = {
        "name": "lookalike",  # renamed below to job-lookalike, as jobs are named
        "gpu": {"count": 1},
        "command": ["serve"],
        "serve": {"model": "m", "port": 9100},
    }
    data: dict[str, Any] = {
        "fleet": {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 2}]}]},
        "tenants": [{"name": "contoso", "isolation": "dedicated", "workloads": [lookalike]}],
        "queues": {
            "organisations": [
                {"name": "o", "teams": [{"name": "t", "tenants": [{"name": "contoso"}]}]}
            ]
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    (tenant,) = parsed.tenants
    (workload,) = tenant.workloads
    renamed = workload.model_copy(update={"name": "job-lookalike"})
    return parsed.model_copy(
        update={"tenants": [tenant.model_copy(update={"workloads": [renamed]})]}
    )


def test_a_jobs_replica_is_marked_and_gets_its_own_network_a_lookalike_is_not() -> None:
    applied = spec()
    plan = make_plan(applied)
    job = JobSpec(tenant="contoso", gpu={"count": 1}, command=["train"])  # type: ignore[arg-type]
    placement = next(p for p in plan.placements if p.workload == "job-lookalike")
    free_gpu = next(i for i in (0, 1) if i not in placement.gpu_indices)
    where = placement.model_copy(update={"gpu_indices": [free_gpu]})
    run_spec, run_plan = live_revision(
        applied, plan, queue_tree(applied), [LiveJob("j1", job, where)]
    )
    host = desired_host(run_spec, run_plan, "n0")
    replicas = {w.workload: w for w in host.workloads}
    assert replicas["job-j1"].job
    assert replicas["job-j1"].network is Network.NONE
    assert not replicas["job-lookalike"].job
    assert replicas["job-lookalike"].network is Network.HOST


def test_as_workload_is_a_job_workload_in_its_own_network() -> None:
    job = JobSpec(tenant="contoso", gpu={"count": 1}, command=["train"])  # type: ignore[arg-type]
    workload = job.as_workload("job-j2", 30.0)
    assert isinstance(workload, JobWorkloadSpec)
    assert workload.network is Network.NONE


def test_a_job_marked_replica_gets_its_own_network_whatever_its_network_field_says() -> None:
    job = wanted("job-j3", binding(Mode.DEDICATED, 0), network=Network.HOST, job=True)
    assert own_network(job)
    argv = process_argv(job, ["/cg/cgroup.procs"], (1001, 1002))
    after_join = argv[argv.index("--") + 1 :]
    assert after_join[:3] == ["unshare", "--net", "--"]
    with_tmp = process_argv(job, ["/cg/cgroup.procs"], (1001, 1002), private_tmp=True)
    flags = with_tmp[with_tmp.index("unshare") + 1 : with_tmp.index("unshare") + 5]
    assert "--net" in flags
    served = wanted("job-j3", binding(Mode.DEDICATED, 0), network=Network.HOST, job=True)
    contained = served.model_copy(update={"image": "img", "port": 8000})
    run = container_argv("docker", contained, [], {}, "inst", (1, 1))
    assert run[run.index("--network") + 1] == "none"
    assert "--publish" not in run


def test_a_spec_workload_on_the_host_network_stays_there() -> None:
    served = wanted("chat", binding(Mode.DEDICATED, 0), network=Network.HOST)
    assert not own_network(served)
    argv = process_argv(served, ["/cg/cgroup.procs"], (1001, 1002))
    assert "unshare" not in argv
