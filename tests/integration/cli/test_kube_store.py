"""`gpuplex kube render` without a spec file renders the control plane's applied revision: the
plan as it was stored when the spec was applied, not a fresh plan of the same spec."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.kube.output import to_yaml
from gpuplex.kube.render import render_plan
from gpuplex.revision import AppliedRevisions
from gpuplex.server.context import ServerContext
from gpuplex.server.spec_apply import apply
from gpuplex.store.db import open_store
from gpuplex.store.spec_revisions import SpecRevisions

SPEC = """
kubernetes: {{}}
fleet:
  nodes:
    - {{name: n1, gpus: [{{model: H100-80GB, count: 2, mig: "off"}}]}}
tenants:
{tenants}
"""
TENANT = """  - name: {name}
    isolation: dedicated
    workloads:
      - {{name: job, gpu: {{count: 1}}, command: ["train"]}}
"""


def spec(*tenants: str) -> str:
    return SPEC.format(tenants="".join(TENANT.format(name=name) for name in tenants))


def test_render_without_a_file_is_the_stored_plan(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'gpuplex.db'}"
    engine = open_store(store_url)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK)
    first, _ = apply(ctx.spec_history, spec("first", "second"), 0, actor="test")
    apply(ctx.spec_history, spec("second"), first.revision, actor="test")  # `second` keeps GPU 1
    applied = AppliedRevisions(SpecRevisions(engine)).get()
    engine.dispose()
    assert applied is not None
    assert [p.gpu_indices for p in applied.plan.placements] == [[1]]

    result = CliRunner().invoke(app, ["kube", "render", "--store", store_url])
    assert result.exit_code == 0, result.output
    assert result.stdout == to_yaml(render_plan(applied.spec, applied.plan).manifests)
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert any(d["kind"] == "Deployment" or d["kind"] == "Job" for d in documents)


def test_render_without_a_file_and_nothing_applied_says_so(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'gpuplex.db'}"
    open_store(store_url).dispose()
    result = CliRunner().invoke(app, ["kube", "render", "--store", store_url])
    assert result.exit_code == 2
    assert "no spec is applied in the store" in result.output


def test_a_file_and_a_store_together_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(spec("first"))
    result = CliRunner().invoke(app, ["kube", "render", str(path), "--store", "sqlite://"])
    assert result.exit_code == 2
    assert "not both" in result.output
