"""`gpuplex catalog --spec FILE` lists the models the spec's fleet.gpu_models adds beside the
built-in ones; `gpuplex plan` places work on them."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.core.catalog import GPU_MODELS
from gpuplex.errors import NotFoundError

SPEC = """\
fleet:
  gpu_models:
    - name: L40
      memory_gib: 48
      sm_count: 142
    - name: H20
      memory_mib: 98304
      sm_count: 78
  nodes:
    - name: box
      gpus:
        - model: L40
          count: 2
        - model: H20
tenants:
  - name: acme
    isolation: dedicated
    workloads:
      - name: big
        gpu: {count: 1, model: H20}
"""


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(SPEC)
    return path


def _row(output: str, name: str) -> list[str]:
    line = next(line for line in output.splitlines() if f" {name} " in line)
    return [cell.strip() for cell in line.split("│")[1:-1]]


def test_catalog_with_a_spec_lists_its_added_models_and_every_built_in(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["catalog", "--spec", str(_spec(tmp_path))])
    assert done.exit_code == 0, done.output
    for model in GPU_MODELS:
        assert model.name in done.output
    assert _row(done.output, "L40") == ["L40", "48.0", "142", "no", "spec"]
    assert _row(done.output, "H20") == ["H20", "96.0", "78", "no", "spec"]


def test_catalog_without_the_spec_does_not_know_the_added_model(tmp_path: Path) -> None:
    listed = CliRunner().invoke(app, ["catalog"])
    assert " L40 " not in listed.output
    one = CliRunner().invoke(app, ["catalog", "L40"])
    assert isinstance(one.exception, NotFoundError)  # `gpuplex` prints it and exits 2
    assert "--spec FILE" in one.exception.message
    with_spec = CliRunner().invoke(app, ["catalog", "L40", "--spec", str(_spec(tmp_path))])
    assert with_spec.exit_code == 0, with_spec.output
    assert "L40 has no MIG" in with_spec.output


def test_plan_places_work_on_an_added_model(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "-o", "json"])
    assert done.exit_code == 0, done.output
    assert '"gpu_model": "H20"' in done.output
