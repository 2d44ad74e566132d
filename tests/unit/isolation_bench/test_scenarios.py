"""The scenarios of `gpuplex bench isolation` and the specs that run them: every spec is valid and
its plan puts every tenant on the one GPU, with the isolation and MPS shares the scenario names."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from gpuplex.core.plan.model import Mode
from gpuplex.core.plan.placer import make_plan
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.isolation_bench.report import markdown_report
from gpuplex.isolation_bench.scenarios import (
    LoopProgram,
    Scenario,
    SharingPattern,
    go_path,
    result_path,
    scenario_spec,
    scenarios,
)

PROGRAM = LoopProgram("/usr/bin/python3", "torch", 4096, 8, 15.0, 8.0)
FLEET = {"nodes": [{"name": "bench", "gpus": [{"model": "H100-80GB", "count": 1}]}]}
OUT = PurePosixPath("/srv/bench")


def test_the_scenarios_per_batch_then_steady_beside_heavy() -> None:
    names = [s.name for s in scenarios([1, 32], 2, 256)]
    assert names == [
        "exclusive-b1", "timeslice-b1", "mps-equal-b1", "mps-30-70-b1",
        "exclusive-b32", "timeslice-b32", "mps-equal-b32", "mps-30-70-b32",
        "steady+heavy-timeslice", "steady+heavy-mps",
    ]  # fmt: skip


def test_batch_1_is_added_for_the_interference_baseline() -> None:
    names = [s.name for s in scenarios([32], 3, 128)]
    assert "exclusive-b1" in names
    equal = next(s for s in scenarios([32], 3, 128) if s.name == "mps-equal-b32")
    assert [t.thread_percent for t in equal.tenants] == [33, 33, 33]


def test_sharing_needs_two_copies() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        scenarios([1], 1, 256)


@pytest.mark.parametrize("scenario", scenarios([1, 32], 2, 256), ids=lambda s: s.name)
def test_each_spec_places_every_tenant_on_the_one_gpu(scenario: Scenario) -> None:
    document = scenario_spec(scenario, PROGRAM, FLEET, OUT, 90.0)
    spec = validate_spec(document)
    assert isinstance(spec, GpuplexSpec), spec
    plan = make_plan(spec)
    assert plan.infeasible == []
    assert {tuple(p.gpu_indices) for p in plan.placements} == {(0,)}
    expected_mode = {
        SharingPattern.EXCLUSIVE: Mode.DEDICATED,
        SharingPattern.TIMESLICE: Mode.TIMESLICE,
        SharingPattern.MPS: Mode.MPS,
    }[scenario.pattern]
    assert {p.mode for p in plan.placements} == {expected_mode}
    threads = {p.tenant: p.thread_percent for p in plan.placements}
    assert threads == {t.name: t.thread_percent for t in scenario.tenants}


def test_the_loop_command_carries_the_batch_go_file_and_result_path() -> None:
    scenario = scenarios([32], 2, 256)[1]  # timeslice-b1
    document = scenario_spec(scenario, PROGRAM, FLEET, OUT, 90.0)
    argv = document["tenants"][0]["workloads"][0]["command"]
    assert argv[:3] == ["/usr/bin/python3", "-m", "gpuplex.isolation_bench.loop"]
    assert argv[argv.index("--go") + 1] == str(go_path(OUT, scenario))
    assert argv[argv.index("--go-wait-s") + 1] == "90"
    assert argv[argv.index("--out") + 1] == str(result_path(OUT, scenario, scenario.tenants[0]))


def test_the_markdown_report_has_the_three_tables_even_when_empty() -> None:
    text = markdown_report([], PROGRAM)
    assert text.count("### ") == 3
    assert "torch, 8 dense layers of width 4096" in text
