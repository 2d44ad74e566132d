"""Every shipped example, applied in dry run on every node of its fleet, as an operator trying it
would: what `validate` and `plan` accept, `host apply` must not refuse (a port two replicas share
on one node was refused only at apply). Commands that are not installed here (vllm) are listed as
`would not start`, which is what a dry run is for."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.e2e.cli_runs import ROOT, run_in_process

EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
CASES = [
    (example, node["name"])
    for example in EXAMPLES
    for node in yaml.safe_load(example.read_text())["fleet"].get("nodes", [])
]


@pytest.mark.parametrize(("example", "node"), CASES, ids=[f"{e.stem}-{n}" for e, n in CASES])
def test_every_example_applies_in_dry_run_on_every_node(
    example: Path,
    node: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["host", "apply", str(example), "--dry-run", "--driver", "sim", "--node", node]
    result = run_in_process([*args, "--state-dir", str(tmp_path / "none")], monkeypatch, capsys)
    assert result.exit_code == 0, result.output
    assert "is used by" not in result.output
    assert not (tmp_path / "none").exists()  # a dry run creates nothing


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_validate_sees_no_port_clash_in_the_examples(
    example: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_in_process(["validate", str(example)], monkeypatch, capsys)
    assert result.exit_code == 0, result.output
    assert "warning" not in result.output


def test_validate_and_plan_say_what_host_apply_would_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two served workloads left on the default port, placed on one node."""
    served = [
        {
            "name": name,
            "isolation": "dedicated",
            "workloads": [
                {
                    "name": "chat",
                    "gpu": {"count": 1},
                    "serve": {"model": name},
                    "command": ["serve"],
                }
            ],
        }
        for name in ("acme", "globex")
    ]
    document = {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 2}]}]},
        "tenants": served,
    }
    path = tmp_path / "clash.yaml"
    path.write_text(yaml.safe_dump(document))
    for command in (["validate", str(path)], ["plan", str(path), "-o", "json"]):
        result = run_in_process(command, monkeypatch, capsys)
        assert result.exit_code == 0, result.output
        assert "on node box: port 8000 is used by acme/chat#0, globex/chat#0" in result.stderr
        assert "`host apply` there would refuse it" in result.stderr
    refused = run_in_process(
        ["host", "apply", str(path), "--dry-run", "--driver", "sim", "--state-dir", str(tmp_path)],
        monkeypatch,
        capsys,
    )
    assert refused.exit_code == 1
    assert "port 8000 is used by acme/chat#0, globex/chat#0" in refused.stderr
