"""`plan` and `explain` answers a tenant can follow, each run as a real process: what re-planning
changes in the text output, and a request rounded up to a larger MIG profile with its cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.cli_runs import ROOT, CliResult, run_subprocess

SAAS = ROOT / "examples" / "saas-single-server.yaml"

FORTY_GIB_ON_AN_A100 = """\
version: 1
fleet:
  nodes:
    - name: n1
      gpus: [{model: A100-80GB, count: 1}]
tenants:
  - name: acme
    isolation: mig
    workloads:
      - {name: chat, gpu: {memory_gib: 40}}
"""


def ok(result: CliResult) -> CliResult:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # wide enough that no cell folds


def test_plan_current_prints_the_moves_and_mig_layout_changes(tmp_path: Path) -> None:
    """contoso may no longer share with fabrikam (they share GPU 4): its two 1g.10gb slices move
    to GPU 6, and both GPUs' MIG layouts change."""
    current = tmp_path / "current.json"
    current.write_text(ok(run_subprocess("plan", SAAS, "-o", "json")).stdout)
    data = yaml.safe_load(SAAS.read_text())
    contoso = next(t for t in data["tenants"] if t["name"] == "contoso")
    contoso["never_share_with"] = ["fabrikam"]
    changed = tmp_path / "saas2.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    text = ok(run_subprocess("plan", changed, "--current", current)).stdout
    rows = [
        " ".join(cell.strip() for cell in line.split("│") if cell.strip())
        for line in text.splitlines()
    ]
    assert "Changes against the current plan" in text
    assert "move contoso/embed#0 h100-a GPU 4 1g.10gb@6 h100-a GPU 6 1g.10gb@6" in rows
    assert "move contoso/embed#1 h100-a GPU 4 1g.10gb@2 h100-a GPU 6 1g.10gb@4" in rows
    assert (
        "MIG layout h100-a GPU 4 1g.10gb@2, 1g.10gb@6, 2g.20gb@0, 2g.20gb@4 2g.20gb@0, 2g.20gb@4"
        in rows
    )
    assert "MIG layout h100-a GPU 6 no MIG instances 1g.10gb@4, 1g.10gb@6" in rows
    assert text.rstrip().endswith("2 moved, 2 MIG layouts changed")


def test_plan_without_changes_prints_no_changes_table(tmp_path: Path) -> None:
    current = tmp_path / "current.json"
    current.write_text(ok(run_subprocess("plan", SAAS, "-o", "json")).stdout)
    text = ok(run_subprocess("plan", SAAS, "--current", current)).stdout
    assert "Changes against the current plan" not in text


@pytest.fixture
def forty_gib(tmp_path: Path) -> Path:
    spec = tmp_path / "a100.yaml"
    spec.write_text(FORTY_GIB_ON_AN_A100)
    return spec


ROUNDED = (
    "  rounded up: asked 40 GiB; the next smaller profile, 4g.40gb, holds only 39.5 GiB "
    "(40448 MiB), so it got 7g.80gb: 79.25 GiB (81152 MiB)"
)


def test_explain_says_a_memory_request_was_rounded_up_and_what_it_costs(forty_gib: Path) -> None:
    lines = ok(run_subprocess("explain", forty_gib, "acme/chat")).stdout.splitlines()
    assert ROUNDED in lines
    assert "  cost: 7/7 of a GPU; no price (pricing has no gpu_hour for this GPU model)" in lines


def test_explain_prices_the_rounded_up_slice_from_the_pricing(forty_gib: Path) -> None:
    forty_gib.write_text(FORTY_GIB_ON_AN_A100 + 'pricing:\n  gpu_hour: {A100-80GB: "2.80"}\n')
    result = ok(run_subprocess("explain", forty_gib, "acme/chat", "-o", "json"))
    document = json.loads(result.stdout)
    assert ROUNDED in document["explanation"]
    assert "  cost: 2.80 USD/h for 7/7 of a GPU" in document["explanation"]
    [placement] = document["placements"]
    assert placement["rounded_up"] == {
        "requested_memory_mib": 40960,
        "requested_compute_percent": None,
        "granted": "7g.80gb",
        "granted_memory_mib": 81152,
        "smaller": "4g.40gb",
        "smaller_memory_mib": 40448,
    }
    assert placement["cost"]["price_per_hour"] == "2.80"
    assert placement["cost"]["gpu_share"] == "1"


def test_plan_table_shows_what_was_asked_and_the_cost(forty_gib: Path) -> None:
    forty_gib.write_text(FORTY_GIB_ON_AN_A100 + 'pricing:\n  gpu_hour: {A100-80GB: "2.80"}\n')
    text = ok(run_subprocess("plan", forty_gib)).stdout
    row = next(line for line in text.splitlines() if "acme/chat#0" in line and "7g.80gb" in line)
    assert "79.2 (asked 40)" in row
    assert "2.80 USD/h" in row
