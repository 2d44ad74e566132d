"""`gpuplex` end to end on the shipped examples: validate, plan in every output format, re-planning
against a current plan, explain and schema, each run as a real process."""

from __future__ import annotations

import json
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplex.core.catalog import GPU_MODELS
from gpuplex.core.plan import Plan
from gpuplex.specfile import load_spec_file
from tests.e2e.cli_runs import EXAMPLES, ROOT, CliResult, run_in_process, run_subprocess

EXIT_BAD_INPUT = 2


def example_id(path: Path) -> str:
    return path.stem


examples = pytest.mark.parametrize("example", EXAMPLES, ids=example_id)


def ok(result: CliResult) -> CliResult:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def plan_json() -> dict[Path, str]:
    """`plan -o json` of each example, run once for the module."""
    return {
        example: ok(run_subprocess("plan", example, "-o", "json")).stdout for example in EXAMPLES
    }


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@examples
def test_validate_accepts_the_example(example: Path) -> None:
    result = ok(run_subprocess("validate", example))
    assert result.stdout.startswith("valid: ")
    assert result.stderr == ""


@examples
def test_plan_prints_a_table_and_summary(
    example: Path, plan_json: dict[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # wide enough that no cell folds
    result = ok(run_subprocess("plan", example))
    plan = Plan.model_validate_json(plan_json[example])
    assert "Placements" in result.stdout
    summary = [line for line in result.stdout.splitlines() if " placed on " in line]
    assert len(summary) == 1, result.stdout
    placed, gpus = plan.summary.replicas_placed, plan.summary.gpus_total
    assert summary[0].startswith(f"{placed} replica{'' if placed == 1 else 's'} placed on ")
    assert f" of {gpus} GPU{'' if gpus == 1 else 's'} (" in summary[0]
    for placement in plan.placements:
        assert f"{placement.tenant}/{placement.workload}#{placement.replica}" in result.stdout


@examples
def test_plan_json_round_trips_byte_for_byte(example: Path, plan_json: dict[Path, str]) -> None:
    text = plan_json[example]
    plan = Plan.model_validate_json(text)
    assert plan.placements, "an example should place something"
    assert plan.model_dump_json(indent=2) + "\n" == text


@examples
def test_plan_json_is_deterministic(example: Path, plan_json: dict[Path, str]) -> None:
    again = ok(run_subprocess("plan", example, "-o", "json")).stdout
    assert again == plan_json[example]


def test_plan_json_does_not_depend_on_the_hash_seed() -> None:
    """Set and dict order of strings changes with PYTHONHASHSEED; the plan must not."""
    example = ROOT / "examples" / "enterprise-cluster.yaml"
    first = ok(run_subprocess("plan", example, "-o", "json", hash_seed=1)).stdout
    second = ok(run_subprocess("plan", example, "-o", "json", hash_seed=2)).stdout
    assert first == second


@examples
def test_plan_yaml_matches_the_json(example: Path, plan_json: dict[Path, str]) -> None:
    result = ok(run_subprocess("plan", example, "-o", "yaml"))
    data = yaml.safe_load(result.stdout)
    assert isinstance(data, dict)
    assert data == json.loads(plan_json[example])


def _without_reasons(plan: Plan) -> list[dict[str, Any]]:
    return [placement.model_dump(exclude={"reason"}) for placement in plan.placements]


@examples
def test_replan_against_its_own_plan_moves_nothing(
    example: Path, plan_json: dict[Path, str], tmp_path: Path
) -> None:
    current = tmp_path / "current.json"
    current.write_text(plan_json[example])
    result = ok(run_subprocess("plan", example, "--current", current, "-o", "json"))
    before = Plan.model_validate_json(plan_json[example])
    after = Plan.model_validate_json(result.stdout)
    assert after.moves == []
    assert after.summary.moves == 0
    assert after.preemptions == []
    assert _without_reasons(after) == _without_reasons(before)


GARBAGE_PLANS: dict[str, bytes] = {
    "not-json": b"this is not a plan\n",
    "binary": bytes(range(256)),
    "json-list": b"[1, 2, 3]\n",
    "empty-object": b"{}\n",
    "a-spec-not-a-plan": EXAMPLES[0].read_bytes(),
}


@pytest.mark.parametrize("content", GARBAGE_PLANS.values(), ids=GARBAGE_PLANS.keys())
def test_replan_against_garbage_exits_2(content: bytes, tmp_path: Path) -> None:
    current = tmp_path / "current.json"
    current.write_bytes(content)
    result = run_subprocess("plan", EXAMPLES[0], "--current", current)
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == EXIT_BAD_INPUT
    assert result.stdout == ""
    assert f"{current}: not a gpuplex plan" in result.stderr
    assert "gpuplex plan FILE -o json" in result.stderr, "the message says what to do next"


def test_replan_against_a_missing_plan_exits_2(tmp_path: Path) -> None:
    result = run_subprocess("plan", EXAMPLES[0], "--current", tmp_path / "gone.json")
    assert "Traceback" not in result.output
    assert result.exit_code == EXIT_BAD_INPUT
    assert "gone.json: cannot read the plan" in result.stderr


@examples
def test_explain_a_placed_workload_names_node_and_mode(
    example: Path, plan_json: dict[Path, str]
) -> None:
    plan = Plan.model_validate_json(plan_json[example])
    placement = plan.placements[0]
    name = f"{placement.tenant}/{placement.workload}"
    result = ok(run_subprocess("explain", example, name))
    text = " ".join(result.stdout.split())  # rich wraps long lines; compare words, not lines
    assert text.startswith(f"{name}:")
    assert f"isolation: {placement.mode}" in text
    assert f"replica {placement.replica}: {placement.node} GPU" in text


@examples
def test_explain_an_unknown_workload_lists_the_known_ones(example: Path) -> None:
    spec = load_spec_file(example)
    known = [
        f"{tenant.name}/{workload.name}" for tenant in spec.tenants for workload in tenant.workloads
    ]
    assert known
    result = run_subprocess("explain", example, "no-such-workload")
    assert "Traceback" not in result.output
    assert result.exit_code == EXIT_BAD_INPUT
    assert "no workload 'no-such-workload'" in result.stderr
    for name in known:
        assert name in result.stderr


def test_schema_is_json_with_the_top_level_sections() -> None:
    result = ok(run_subprocess("schema"))
    schema = json.loads(result.stdout)
    assert isinstance(schema, dict)
    assert {"fleet", "tenants", "pricing", "policy"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False, "unknown keys are errors, editors should say so"


def test_catalog_lists_every_model() -> None:
    result = ok(run_subprocess("catalog"))
    for model in GPU_MODELS:
        assert model.name in result.stdout


def test_catalog_model_lists_its_mig_profiles_with_starts() -> None:
    result = ok(run_subprocess("catalog", "A30"))
    assert "2g.12gb+me" in result.stdout
    assert "0,1,2,3" in result.stdout


def test_catalog_unknown_model_exits_2_with_a_suggestion() -> None:
    result = run_subprocess("catalog", "h100")
    assert result.exit_code == 2
    assert 'did you mean "H100-80GB"' in result.stderr
    assert "Traceback" not in result.output


def test_plan_and_explain_take_a_kubernetes_target(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """host-demo.yaml has no `kubernetes:` section: its host plan puts MPS beside MIG on one node;
    planned for Kubernetes, the MPS replicas are not placed, and explain says why the node is MIG."""
    example = str(ROOT / "examples" / "host-demo.yaml")
    host = Plan.model_validate_json(
        ok(run_in_process(["plan", example, "-o", "json"], monkeypatch, capsys)).stdout
    )
    kube = Plan.model_validate_json(
        ok(
            run_in_process(
                ["plan", example, "-o", "json", "--target", "kubernetes"], monkeypatch, capsys
            )
        ).stdout
    )
    assert host.infeasible == []
    assert [i.label() for i in kube.infeasible] == ["hobby/playground#0", "hobby/playground#1"]
    text = " ".join(
        ok(
            run_in_process(
                ["explain", example, "acme/chat", "--target", "kubernetes"], monkeypatch, capsys
            )
        ).stdout.split()
    )
    assert "node demo: MIG slices (acme/chat) and no full GPU in use; it takes no MPS" in text
    hobby = " ".join(
        ok(
            run_in_process(
                ["explain", example, "hobby/playground", "--target", "kubernetes"],
                monkeypatch,
                capsys,
            )
        ).stdout.split()
    )
    assert "its node has GPUs in MIG mode; Kubernetes's device plugin runs no MPS" in hobby
    host_text = ok(run_in_process(["explain", example, "acme/chat"], monkeypatch, capsys)).stdout
    assert "node demo:" not in host_text
    refused = run_in_process(["plan", example, "--target", "cloud"], monkeypatch, capsys)
    assert refused.exit_code == EXIT_BAD_INPUT


def test_version_prints_the_installed_version() -> None:
    result = ok(run_subprocess("--version"))
    assert result.stdout == f"gpuplex {package_version('gpuplex')}\n"


def test_a_piped_table_is_as_wide_as_it_needs_not_cut_to_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`gpuplex plan FILE | cat`: stdout is a pipe and $COLUMNS is not set."""
    monkeypatch.delenv("COLUMNS", raising=False)
    result = ok(run_subprocess("plan", ROOT / "examples" / "enterprise-cluster.yaml"))
    assert "Placements" in result.stdout
    assert "…" not in result.stdout  # at 80 columns three cells were cut


def test_host_status_of_a_state_dir_never_applied_creates_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    result = run_subprocess("host", "status", "--state-dir", state)
    assert result.exit_code != 0
    assert "no simulated GPUs" in result.stderr
    assert "Traceback" not in result.output
    assert not state.exists()
