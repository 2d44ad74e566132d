"""The extender-call benchmark runs end to end at a tiny size on the real openb trace. No timing
assertions: timings are the benchmark's output (docs/kubernetes.md), not a test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.extender_calls import main

OPENB = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"
pytestmark = pytest.mark.skipif(not OPENB.is_dir(), reason=f"the openb trace is not at {OPENB}")
TINY = ["--data", str(OPENB), "--held", "200", "--calls", "3"]


def test_every_policy_answers_every_call_against_best_fit_of_the_same_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*TINY, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["nodes"] == 1213
    assert 0 < result["held_pods"] <= 200
    assert result["held_gpus"] >= result["held_gpu_pods"] > 0
    assert len(result["asked_gpus"]) == 3
    assert min(result["asked_gpus"]) >= 1
    policies = [row["policy"] for row in result["rows"]]
    assert policies == ["best-fit", "fgd", "fgd-balanced"]
    assert result["rows"][0]["p50_vs_baseline"] == 1.0
    for row in result["rows"]:
        assert row["calls"] == 3
        assert row["placed"] == 3  # openb's nodes are far from full at 200 pods
        assert 0 < row["p50_ms"] <= row["p95_ms"] <= row["max_ms"]


def test_scale_copies_the_nodes_and_their_pods(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "--json", "--policies", "best-fit"]) == 0
    once = json.loads(capsys.readouterr().out)
    assert main([*TINY, "--json", "--policies", "best-fit", "--scale", "2"]) == 0
    twice = json.loads(capsys.readouterr().out)
    assert twice["nodes"] == 2 * once["nodes"]
    assert twice["held_pods"] == 2 * once["held_pods"]
    assert twice["held_gpus"] == 2 * once["held_gpus"]


def test_the_table_names_the_baseline_and_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "--policies", "best-fit,fgd-balanced"]) == 0
    out = capsys.readouterr().out
    for text in ("p50 / best-fit", "5 s timeout", "fgd-balanced", "1,213 nodes"):
        assert text in out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--policies", "random"], "--policies: ['random']"),
        (["--scale", "0"], "--scale at least 1"),
        (["--data", "/nonexistent"], "no openb_node_list_gpu_node.csv"),
    ],
)
def test_bad_options_are_refused_with_what_is_wrong(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*TINY, *args])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
