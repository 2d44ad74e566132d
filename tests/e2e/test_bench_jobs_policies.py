"""The policy-against-policy jobs replay bench runs end to end on a slice of the real openb trace
(200 nodes, of which it keeps every 20th, and the first 300 pods), with gpuplex's choice of policy
per seed and what choosing gains. No timing assertions: the figures are the bench's output
(docs/benchmarks.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench.jobs_policies import main

OPENB = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "openb"
pytestmark = pytest.mark.skipif(not OPENB.is_dir(), reason=f"the openb trace is not at {OPENB}")
POLICIES = ("best-fit", "fgd", "fgd-balanced")


def openb_slice(folder: Path) -> Path:
    nodes = (OPENB / "openb_node_list_gpu_node.csv").read_text().splitlines()[:201]
    pods = (OPENB / "openb_pod_list_default.csv").read_text().splitlines()[:301]
    (folder / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes) + "\n")
    (folder / "openb_pod_list_slice.csv").write_text("\n".join(pods) + "\n")
    return folder


def test_each_seed_gets_a_choice_and_the_choice_is_scored_against_every_fixed_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = openb_slice(tmp_path)
    argv = ["--data", str(data), "--families", "slice", "--seeds", "1,2", "--speedups", "50"]
    assert main([*argv, "--workers", "1"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.match(r"\| \d \| ", line)]
    assert [row.split(" | ")[1] for row in rows] == list(POLICIES) * 2
    chosen = re.findall(r"^  slice x50 seed (\d): (\S+) \((.+)\)$", out, re.MULTILINE)
    assert [seed for seed, _, _ in chosen] == ["1", "2"]
    assert all(policy in POLICIES and reason for _, policy, reason in chosen), chosen
    for label in ("chosen from the same replay", "chosen from another seed"):
        for figure in ("p99", "longest"):
            line = next(
                line for line in out.splitlines() if line.startswith(f"  {label}, {figure}:")
            )
            ratios = dict(re.findall(r"/ (\S+) (\d+\.\d{3})", line))
            assert set(ratios) == set(POLICIES), line
