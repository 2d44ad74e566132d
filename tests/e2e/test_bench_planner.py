"""The planner benchmark runs end to end at a tiny size. No timing assertions: timings are the
benchmark's output (docs/benchmarks.md), not a test."""

from __future__ import annotations

import json

import pytest
from bench.planner import main, parse_options
from bench.planner_spec import Options, build_spec

from gpuplex.core.spec import check_spec

TINY = ["--nodes", "10", "--workloads", "50", "--runs", "1"]


def test_bench_places_every_replica_and_never_beats_the_lower_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*TINY, "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    about = results["input"]
    binpack, kubernetes, spread, naive = results["runs"]
    assert binpack["placer"] == "make_plan, binpack"
    assert kubernetes["placer"] == "make_plan, for Kubernetes"
    assert kubernetes["placed"] + kubernetes["not_placed"] >= about["replicas"]
    assert about["gpus"] == 80
    assert about["workloads"] == 50
    assert binpack["placed"] == about["replicas"]
    assert binpack["not_placed"] == 0
    assert naive["finished"]
    for run in (binpack, kubernetes, spread, naive):
        assert run["gpus_used"] >= about["lower_bound"] or run["not_placed"] > 0
    assert binpack["gpus_used"] >= about["lower_bound"] > 0
    assert 0.5 < about["fill"] <= 1.0
    assert len(binpack["seconds"]) == 1
    assert "target_s" not in results  # the 10 s target applies at the size only


def test_bench_prints_the_tables_with_machine_and_baselines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(TINY) == 0
    out = capsys.readouterr().out
    for text in ("CPU", "lower bound", "make_plan, binpack", "for Kubernetes", "first fit"):
        assert text in out


def test_bench_input_is_a_valid_spec_and_the_same_for_the_same_seed() -> None:
    options = Options(nodes=10, workloads=50)
    spec = build_spec(options)
    assert check_spec(spec) == []
    assert build_spec(options) == spec
    assert build_spec(Options(nodes=10, workloads=50, seed=2)) != spec


def test_no_kubernetes_leaves_out_only_that_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "--json", "--no-kubernetes"]) == 0
    placers = [run["placer"] for run in json.loads(capsys.readouterr().out)["runs"]]
    assert "make_plan, for Kubernetes" not in placers
    assert placers[0] == "make_plan, binpack"
    assert len(placers) == 3


def test_scale_multiplies_the_default_sizes_and_an_explicit_size_wins() -> None:
    options, _ = parse_options(["--scale", "10"])
    assert (options.nodes, options.workloads, options.tenants) == (10000, 100000, 2000)
    options, _ = parse_options(["--scale", "10", "--nodes", "3000"])
    assert (options.nodes, options.workloads, options.tenants) == (3000, 100000, 2000)
    options, _ = parse_options([])
    assert (options.nodes, options.workloads, options.tenants) == (1000, 10000, 200)
