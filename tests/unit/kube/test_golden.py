"""The examples' rendered manifests, kept as golden files: a change to what gpuplex renders shows up
in review as a diff of these files. Regenerate with `GPUPLEX_UPDATE_GOLDEN=1 pytest tests/unit/kube`
and read the diff before committing it.

Every object of every golden file also passes the official Kubernetes schemas."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from gpuplex.core.plan import make_plan
from gpuplex.errors import KubeRenderError
from gpuplex.kube.output import to_yaml
from gpuplex.kube.render import render_plan, render_self
from gpuplex.kube.self_manifests import SelfOptions
from gpuplex.specfile import load_spec_file
from tests.unit.kube.schema import assert_valid

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUPLEX_UPDATE_GOLDEN") == "1"

#: Examples whose plan Kubernetes can run as planned.
RENDERED = ["kubernetes-cluster", "laptop"]


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.yaml"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"no golden file {path}: run with GPUPLEX_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{name}: rendered manifests differ from {path.relative_to(ROOT)}; "
        "if the change is intended, regenerate with GPUPLEX_UPDATE_GOLDEN=1 and review the diff"
    )


@pytest.mark.parametrize("example", RENDERED)
def test_an_example_renders_as_its_golden_file(example: str) -> None:
    spec = load_spec_file(ROOT / "examples" / f"{example}.yaml")
    rendered = render_plan(spec, make_plan(spec))
    assert_valid(rendered.manifests)
    text = to_yaml(rendered.manifests)
    assert list(yaml.safe_load_all(text)) == rendered.manifests
    _check_golden(example, text)


def test_the_self_hosting_manifests_render_as_their_golden_file() -> None:
    spec = load_spec_file(ROOT / "examples" / "kubernetes-cluster.yaml")
    rendered = render_self(spec, SelfOptions())
    assert_valid(rendered.manifests)
    _check_golden("kubernetes-cluster-self", to_yaml(rendered.manifests))


def test_rendering_twice_gives_the_same_bytes() -> None:
    spec = load_spec_file(ROOT / "examples" / "kubernetes-cluster.yaml")
    first = to_yaml(render_plan(spec, make_plan(spec)).manifests)
    assert to_yaml(render_plan(spec, make_plan(spec)).manifests) == first


@pytest.mark.parametrize("example", ["saas-single-server", "enterprise-cluster", "host-demo"])
def test_an_example_laid_out_for_one_server_is_refused_with_the_node_and_the_fix(
    example: str,
) -> None:
    spec = load_spec_file(ROOT / "examples" / f"{example}.yaml")
    with pytest.raises(KubeRenderError) as refused:
        render_plan(spec, make_plan(spec))
    message = refused.value.message
    assert message.startswith("the plan cannot run on Kubernetes as planned:")
    assert "- node " in message
    assert "Fix: " in message
