"""`gpuplex queues` end to end: the example's answers (the admission round's own) and fair shares
(checked by hand), --json for scripts, and bad files refused with file:line, exit 2 and no
traceback."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli_runs import ROOT, CliResult, run_in_process, run_subprocess

EXIT_BAD_INPUT = 2
EXAMPLE = ROOT / "examples" / "queues" / "two-orgs.yaml"
#: what each pending workload of the example gets, in file order
EXPECTED = {
    "serve-b": "preempts",
    "big-pretrain": "waits",
    "augment-3": "waits",
    "notebook": "starts",
}


def ok(result: CliResult) -> CliResult:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 0, result.output
    return result


def as_json(result: CliResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(result).stdout)
    return data


def test_the_example_prints_both_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # wide enough that no cell folds
    result = ok(run_subprocess("queues", EXAMPLE))
    assert "Queues on gpus 64 (half-life 86400 s)" in result.stdout
    for outcome in EXPECTED.values():
        assert outcome in result.stdout
    # vision's row: guarantee 8 GPUs, no limit, weight 1, holds 8, yesterday's 8 GPUs for
    # about a day at half weight, fair share 8 + 8/3
    assert re.search(
        r"vision\s*│\s*gpus 8\s*│\s*-\s*│\s*1\s*│\s*gpus 8\s*│\s*gpus 3.96\s*│\s*gpus 10.67",
        result.stdout,
    )
    assert "preempting rl-sweep-2 for it; it starts when they stop" in result.stdout
    assert "organisation acme would pass its limit: 40 GPUs held" in result.stdout


def test_the_example_as_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = as_json(run_in_process(["queues", str(EXAMPLE), "--json"], monkeypatch, capsys))
    assert list(data) == ["capacity", "half_life_s", "queues", "pending"]
    assert (data["capacity"], data["half_life_s"]) == ({"gpus": 64}, 86400)
    pending = {p["name"]: p for p in data["pending"]}
    assert {name: p["outcome"] for name, p in pending.items()} == EXPECTED
    assert [p["starts"] for p in data["pending"]] == [False, False, False, True]
    serve = pending["serve-b"]
    assert serve["victims"] == [{"name": "rl-sweep-2", "tenant": "robotics"}]
    assert serve["reserved"] == {"gpus": 8}
    assert pending["big-pretrain"]["reason"] == (
        "organisation acme would pass its limit: 40 GPUs held (of which 8 set aside for "
        "waiting jobs) + 12 asked > 48"
    )
    # four GPUs are idle: interns used nothing, vision used 8 all of yesterday, so interns'
    # notebook goes first although augment-3 has waited longer
    assert pending["augment-3"]["reason"] == "the cluster is short of 4 GPUs for it"
    queues = {q["name"]: q for q in data["queues"]}
    assert set(queues) == {
        "cluster", "acme", "research", "vision", "nlp", "platform", "inference",
        "beta", "labs", "robotics", "simulation", "interns",
    }  # fmt: skip
    # By hand. Demands (holdings + pending asks): vision 12 GPUs, nlp 28 (its limit: 24),
    # inference 16, robotics 20, simulation 8, interns 4. Own guarantees first: 8, 8, 16, 12, 8
    # and 0 (52); labs' guarantee of 24 leaves 4 over, which robotics and interns share
    # (2 each: robotics 14); the other 8 go by weighted DRF to those still wanting: acme
    # (weight 2) has vision and nlp, beta (1) robotics and interns, so vision and nlp grow
    # twice as fast as robotics and interns: 8/3 each for acme's, 4/3 for beta's.
    assert queues["vision"]["fair_share"]["gpus"] == pytest.approx(8 + 8 / 3, abs=1e-5)
    assert queues["robotics"]["fair_share"]["gpus"] == pytest.approx(14 + 4 / 3, abs=1e-5)
    assert queues["interns"]["fair_share"]["gpus"] == pytest.approx(2 + 4 / 3, abs=1e-5)
    assert queues["inference"]["fair_share"] == {"gpus": 16}
    assert queues["acme"]["holds"] == {"gpus": 32}
    assert queues["acme"]["limit"] == {"gpus": 48}
    assert queues["research"]["limit"] is None
    assert queues["robotics"]["borrowed"] == {"gpus": 8}
    assert queues["vision"]["past_use"]["gpus"] == pytest.approx(3.96, abs=0.01)
    assert (queues["labs"]["parent"], queues["labs"]["depth"], queues["labs"]["level"]) == (
        "beta",
        2,
        "team",
    )


# --- bad files --------------------------------------------------------------------------------

TEXT = EXAMPLE.read_text(encoding="utf-8")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@dataclass(frozen=True)
class BadFile:
    text: str
    #: the error must name the line with this text on it, or `lines_above` lines above it
    near: str
    message: str
    lines_above: int = 0


BAD: dict[str, BadFile] = {
    "unknown field": BadFile(
        TEXT.replace("      weight: 2", "      wieght: 2"),
        "wieght: 2",
        "queues.organisations[0].wieght: unknown key 'wieght' (did you mean \"weight\"?)",
    ),
    "tenant that is not a leaf": BadFile(
        TEXT.replace("{name: train-1, tenant: vision,", "{name: train-1, tenant: research,"),
        "name: train-1",
        "running[0].tenant: 'research' is a team or an organisation, not a tenant of queues:",
    ),
    "guarantees past the parent's": BadFile(
        TEXT.replace("{name: nlp, guarantee: {gpus: 8},", "{name: nlp, guarantee: {gpus: 12},"),
        "tenants:",
        "queues.organisations[0].teams[0].tenants: the guarantees below 'research' add up to "
        "20 GPUs, more than its own guarantee of 16",
    ),
    "negative amount": BadFile(
        TEXT.replace("asks: {gpus: 12}", "asks: {gpus: -12}"),
        "name: big-pretrain",
        "pending[1].asks.gpus: Input should be greater than or equal to 0",
    ),
    "unknown workload to stop for": BadFile(
        TEXT.replace("holds: {gpus: 8}, running_s: 900}", "holds: {gpus: 8}, stopping_for: srv}"),
        "name: rl-sweep-2",
        "running[4].stopping_for: no pending workload is named 'srv'",
    ),
    "malformed YAML": BadFile(
        TEXT.replace("asks: {gpus: 8}, waiting_s: 30}", "asks: {gpus: 8}, waiting_s: 30"),
        "name: big-pretrain",  # the next entry, where the reader finds the brace missing
        "invalid YAML: did not find expected ',' or '}'",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_files_are_refused_with_file_line_and_field(
    case: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bad = BAD[case]
    text = bad.text
    assert text != TEXT, "the change did not apply"
    path = tmp_path / "queues.yaml"
    path.write_text(text, encoding="utf-8")
    result = run_in_process(["queues", str(path), "--json"], monkeypatch, capsys)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    line = _line_of(text, bad.near) - bad.lines_above
    assert re.search(rf"{re.escape(str(path))}:{line}:\d+: ", result.stderr), result.stderr
    assert bad.message in " ".join(result.stderr.split()), result.stderr


def test_a_bad_file_in_a_real_process_prints_one_error_and_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(BAD["negative amount"].text, encoding="utf-8")
    result = run_subprocess("queues", path)
    assert result.exit_code == EXIT_BAD_INPUT
    assert "Traceback" not in result.output
    assert result.stderr.startswith("error: ")
    missing = run_subprocess("queues", tmp_path / "absent.yaml")
    assert missing.exit_code == EXIT_BAD_INPUT
    assert "cannot read the file" in missing.stderr
    assert "Traceback" not in missing.output
