"""The end-to-end jobs benchmark's input and arithmetic (the benchmark itself starts `gpuplex up`:
tests/e2e/test_bench_jobs_end_to_end.py runs it at a tiny size). No timing assertions."""

from __future__ import annotations

import argparse

import pytest
import yaml
from bench.jobs_e2e_client import JobTimes, Submitted, job_body, parse_time
from bench.jobs_e2e_report import (
    FLOOR,
    HOST_ALONE,
    UP,
    EndToEnd,
    FlowRun,
    latency_s,
    per_s,
    process,
    ratio_rows,
    running,
)
from bench.jobs_end_to_end import (
    DEFAULT_MAX_ACTIVE_JOBS,
    DEFAULT_MAX_SUBMITS_PER_MINUTE,
    Options,
    add_arguments,
    bench_spec,
    options_from,
)
from bench.planner_measure import Machine

from gpuplex.core.plan import make_plan
from gpuplex.core.spec.jobs import JobSpec, check_job
from gpuplex.specfile import load_spec_text


def job(submitted: float, starting: float, process_s: float, running_s: float) -> JobTimes:
    return JobTimes("j", "t", submitted, starting, process_s, running_s)


def test_the_spec_takes_every_job_and_the_lower_bound_places_every_workload() -> None:
    options = Options(jobs=30, tenants=3, gpus=1)
    spec = load_spec_text(yaml.safe_dump(bench_spec(options)), source="bench")
    assert spec.queues.enabled
    assert [t.name for t in spec.tenants] == ["tenant-0", "tenant-1", "tenant-2"]
    for tenant in spec.tenants:
        body = job_body(0) | {"tenant": tenant.name}
        assert list(check_job(spec, JobSpec.model_validate(body))) == []
        caps = spec.queues.job_caps_of(tenant.name)  # the defaults: 11 jobs each pass neither
        assert (caps.max_active, caps.max_submits_per_minute) == (
            DEFAULT_MAX_ACTIVE_JOBS,
            DEFAULT_MAX_SUBMITS_PER_MINUTE,
        )
    with_workloads = load_spec_text(yaml.safe_dump(bench_spec(options, 30)), source="bench")
    plan = make_plan(with_workloads)
    assert plan.infeasible == []
    assert len(plan.placements) == 30  # one replica each, round robin over the tenants
    assert {p.tenant for p in plan.placements} == {"tenant-0", "tenant-1", "tenant-2"}


def test_the_caps_are_raised_only_when_a_tenants_share_of_the_jobs_would_pass_them() -> None:
    options = Options(jobs=1200, lone=0, tenants=2, gpus=26)  # 601 a tenant, warm-up included
    spec = load_spec_text(yaml.safe_dump(bench_spec(options)), source="bench")
    caps = spec.queues.job_caps_of("tenant-0")
    assert caps.max_submits_per_minute >= 601
    assert caps.max_active >= 601
    assert (
        "max_submits_per_minute" not in bench_spec(Options(jobs=1196, lone=0, tenants=2))["queues"]
    )


def test_rates_run_from_the_first_submit_to_the_last_job_and_waits_from_each_submit() -> None:
    flood = [job(100.0, 100.5, 101.0, 102.0), job(101.0, 101.5, 103.0, 104.0)]
    assert per_s(flood, running) == pytest.approx(2 / 4.0)
    assert per_s(flood, process) == pytest.approx(2 / 3.0)
    assert latency_s(flood, running, 50) == pytest.approx(2.5)  # waits 2 and 3
    assert latency_s(flood, running, 95) == pytest.approx(2.95)
    unfinished = [*flood, JobTimes("k", "t", 102.0, None, None, None)]
    assert per_s(unfinished, running) is None  # not every job got there: no rate


def test_submits_per_second_count_only_accepted_submits() -> None:
    submits = [
        Submitted(0, "t", 10.0, 10.5, 201, "j1", 10.2),
        Submitted(1, "t", 10.5, 12.0, 201, "j2", 11.0),
        Submitted(2, "t", 10.6, 30.0, 429, None, None, "too many"),
    ]
    run = FlowRun(UP, "after", 0, 2.0, 1.0, [], [], submits)
    assert run.submits_per_s() == pytest.approx(2 / 2.0)


def result(*runs: FlowRun) -> EndToEnd:
    trees = {"after": "the working tree"}
    if any(r.tree == "before" for r in runs):
        trees["before"] = "HEAD = abc"
    return EndToEnd(Machine("cpu", 2, "CPython", "Linux"), "0.1", {}, trees, list(runs))


def test_each_queue_flow_is_compared_with_the_lower_bound_and_up_with_the_floor() -> None:
    up = FlowRun(UP, "after", 0, 2.0, 1.0, [job(0, 1, 2, 4)], [job(0, 1, 2, 5)])
    floor = FlowRun(FLOOR, "after", 0, 0.1, 0.1, [job(0, 0.1, 0.2, 0.4)], [job(0, 0.1, 0.2, 1)])
    bound = FlowRun(HOST_ALONE, "after", 0, None, 0.1, [job(0, 0, 0.1, 0)], [job(0, 0, 0.5, 0)])
    rows = {(r[0], r[2]): r for r in ratio_rows(result(up, floor, bound))}
    lone = rows[(f"{UP} · after: lone job: to running p50 s", f"{HOST_ALONE}: lone job: to process p50 s")]  # fmt: skip
    assert lone[1:] == ("4.00", f"{HOST_ALONE}: lone job: to process p50 s", "0.10", "40.000")
    flood = rows[(f"{UP} · after: flood: jobs/s running", f"{HOST_ALONE}: flood: jobs/s process started")]  # fmt: skip
    assert (flood[1], flood[3], flood[4]) == ("0.20", "2.00", "0.100")
    intervals = rows[(f"{UP} · after: flood: to running p50 s", f"{FLOOR} · after")]
    assert (intervals[1], intervals[3], intervals[4]) == ("5.00", "1.00", "5.000")


def test_against_a_commit_reads_the_median_of_each_rounds_paired_ratio() -> None:
    def up(tree: str, round_: int, wait: float) -> FlowRun:
        return FlowRun(UP, tree, round_, 2.0, 1.0, [job(0, 1, 2, wait)], [job(0, 1, 2, wait)])

    # round 0: after 2 / before 4; round 1 (a slower machine): after 6 / before 4; round 2: 3 / 4
    runs = [up("before", 0, 4), up("after", 0, 2), up("before", 1, 4), up("after", 1, 6)]
    runs += [up("before", 2, 4), up("after", 2, 3)]
    measured = result(*runs)
    assert measured.paired_ratio(UP, "lone job: to running p50 s") == pytest.approx(0.75)
    assert measured.figure(UP, "lone job: to running p50 s", "after") == pytest.approx(3.0)
    rows = [r for r in ratio_rows(measured) if r[2] == f"{UP} · before"]
    assert rows[0][0] == f"{UP} · after: lone job: to running p50 s"
    assert rows[0][4] == "0.750"


def parse(*argv: str) -> Options:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from(parser.parse_args(argv), parser)


def test_options_refuse_more_jobs_than_the_gpus_hold_at_once() -> None:
    assert parse("--e2e-jobs", "371").jobs == 371  # 371 + 10 lone + 1 warm-up = 8 x 48 - 2
    with pytest.raises(SystemExit):
        parse("--e2e-jobs", "380")  # 391 > 384
    assert parse("--e2e-jobs", "380", "--e2e-gpus", "9").gpus == 9
    with pytest.raises(SystemExit):
        parse("--rounds", "2")  # without --against


def test_event_times_are_read_as_utc() -> None:
    assert parse_time("1970-01-01T00:00:01.5Z") == pytest.approx(1.5)
    assert parse_time("1970-01-01T00:00:01.5+00:00") == pytest.approx(1.5)
