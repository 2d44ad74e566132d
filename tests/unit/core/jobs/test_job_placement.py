"""Admitted jobs are placed by the same planner as the spec's replicas, on what those leave, with
the tenant's isolation rules; running work never moves; a job that does not fit waits with the
planner's reasons; a job file is checked against the spec like a workload."""

from __future__ import annotations

from typing import Any

from gpuplex.core.jobs.placement import job_workload_name, place_jobs
from gpuplex.core.plan import make_plan
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec, check_job


def spec() -> GpuplexSpec:
    data: dict[str, Any] = {
        "fleet": {
            "nodes": [
                {"name": "n0", "gpus": [{"model": "H100-80GB", "count": 2, "mig": "off"}]},
                {"name": "n1", "gpus": [{"model": "A100-80GB", "count": 1, "mig": "on"}]},
            ]
        },
        "tenants": [
            {
                "name": "contoso",
                "isolation": "dedicated",
                "workloads": [{"name": "chat", "gpu": {"count": 1}, "command": ["serve"]}],
            },
            {"name": "adatum", "isolation": "mig"},
            {"name": "nobody"},
        ],
        "queues": {
            "organisations": [
                {
                    "name": "acme",
                    "teams": [
                        {"name": "research", "tenants": [{"name": "contoso"}, {"name": "adatum"}]}
                    ],
                }
            ]
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


def job(tenant: str, **gpu: Any) -> JobSpec:
    return JobSpec(tenant=tenant, gpu=gpu, command=["train"])  # type: ignore[arg-type]


def test_jobs_go_beside_the_replicas_by_their_tenants_isolation() -> None:
    applied = spec()
    live = make_plan(applied)
    chat = next(p for p in live.placements if p.workload == "chat")
    out = place_jobs(
        applied,
        live,
        running={},
        starting={"a1": job("contoso", count=1), "b2": job("adatum", mig_profile="3g.40gb")},
        grace_s={"a1": 30.0, "b2": 5.0},
    )
    assert set(out.placed) == {"a1", "b2"}
    assert out.waiting == {}
    a1, b2 = out.placed["a1"], out.placed["b2"]
    assert a1.mode is Mode.DEDICATED
    assert a1.node == "n0"
    assert a1.gpu_indices != chat.gpu_indices  # the replica keeps its GPU; the job takes the other
    assert b2.mode is Mode.MIG
    assert b2.mig is not None
    assert b2.mig.profile == "3g.40gb"
    # the new live plan holds the replica where it was and both jobs
    kept = next(p for p in out.plan.placements if p.workload == "chat")
    assert (kept.node, kept.gpu_indices) == (chat.node, chat.gpu_indices)
    assert {p.workload for p in out.plan.placements} == {
        "chat",
        job_workload_name("a1"),
        job_workload_name("b2"),
    }


def test_a_job_that_does_not_fit_waits_and_running_jobs_stay() -> None:
    applied = spec()
    first = place_jobs(applied, make_plan(applied), {}, {"a1": job("contoso", count=1)}, {})
    running = {"a1": job("contoso", count=1)}
    second = place_jobs(applied, first.plan, running, {"a2": job("contoso", count=1)}, {})
    assert second.placed == {}
    assert second.waiting["a2"].startswith("no GPU has room for it now: ")
    assert [p.workload for p in second.plan.placements if p.workload.startswith("job-")] == [
        job_workload_name("a1")
    ]
    assert second.plan.infeasible == []  # a waiting job is not part of the live plan


def test_a_job_file_is_checked_against_the_spec() -> None:
    applied = spec()
    problems = list(check_job(applied, job("contosso", count=1)))
    assert [(p.path, p.message) for p in problems] == [
        (("tenant",), "unknown tenant 'contosso' (did you mean \"contoso\"?)")
    ]
    problems = list(check_job(applied, job("nobody", count=1)))
    assert problems[0].message == "nobody has no queue in the spec's queues: it cannot run jobs"
    problems = list(check_job(applied, job("adatum", count=1)))
    assert problems[0].path == ("gpu", "count")
    assert "whole GPUs need isolation dedicated or auto" in problems[0].message
    assert list(check_job(applied, job("adatum", mig_profile="1g.10gb"))) == []
