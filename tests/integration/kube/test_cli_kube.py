"""`gpuplex kube render | diff | apply` as a user runs them: output, progress, and every way of not
reaching a cluster ending with a message and its exit code (3 unreachable, 4 forbidden, 5 retry
later, 1 other API refusals, 2 a plan Kubernetes cannot express), never a traceback; a diff the
server refuses exits as apply would.

The renderers are replaced by a stand-in module returning hand-written objects, so these tests
check the command, not the rendering."""

from __future__ import annotations

import socket
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner, Result

from gpuplex.cli import kube as kube_cli
from gpuplex.cli.main import app
from gpuplex.errors import KubeRenderError
from gpuplex.kube.naming import SELF_SET, Manifest
from tests.integration.kube import objects
from tests.integration.kube.conftest import write_kubeconfig
from tests.integration.kube.fake_api import FakeKubeApi, status

ROOT = Path(__file__).resolve().parents[3]
SPEC = str(ROOT / "examples" / "laptop.yaml")


class Rendered:
    def __init__(self, manifests: list[Manifest], notes: list[str] | None = None) -> None:
        self.manifests = manifests
        self.notes = notes or []


class FakeRender:
    """What the stand-in `gpuplex.kube.render` returns, and the options it was called with."""

    def __init__(self) -> None:
        self.plan: Callable[[], Rendered] = lambda: Rendered(
            [objects.namespace(), objects.config_map("gpuplex-settings", {"mode": "mig"})],
            ["node gpu-a: a note about pools"],
        )
        self.self_options: Any = None

    def render_plan(self, spec: object, plan: object) -> Rendered:
        return self.plan()

    def render_self(self, spec: object, options: object) -> Rendered:
        self.self_options = options
        ns = objects.namespace("gpuplex-system", set_name=SELF_SET)
        return Rendered([ns])


@pytest.fixture
def render(monkeypatch: pytest.MonkeyPatch) -> FakeRender:
    fake = FakeRender()
    module = types.ModuleType("gpuplex.kube.render")
    module.render_plan = fake.render_plan  # type: ignore[attr-defined]
    module.render_self = fake.render_self  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpuplex.kube.render", module)
    return fake


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but never listening: connecting is refused."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield bound.getsockname()[1]


def gpuplex(*args: str) -> Result:
    """The CLI with a wide console, so that a table's row stays on one line whatever $COLUMNS
    the process that imported the CLI found (a test worker may have 80)."""
    with mock.patch.object(kube_cli, "out", Console(width=240)):
        result = CliRunner().invoke(app, ["kube", *args])
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    return result


def test_apply_prints_each_object_and_a_summary(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    result = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig))

    assert result.exit_code == 0, result.output
    assert "created Namespace/gpuplex-acme" in result.stdout
    assert "created ConfigMap/gpuplex-acme/gpuplex-settings" in result.stdout
    assert result.stdout.strip().endswith("2 created")
    assert "note: node gpu-a: a note about pools" in result.stderr
    assert api.get("v1", "ConfigMap", "gpuplex-settings", "gpuplex-acme")["data"] == {"mode": "mig"}


def test_apply_dry_run_server_and_no_prune(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    api.put(objects.config_map("gpuplex-old", {}, namespace="default"))
    result = gpuplex(
        "apply", SPEC, "--dry-run", "server", "--no-prune", "--kubeconfig", str(kubeconfig)
    )

    assert result.exit_code == 0, result.output
    assert "(server dry run: nothing was changed)" in result.stdout
    assert "create Namespace/gpuplex-acme" in result.stdout
    assert "created" not in result.stdout
    assert all(r.query.get("dryRun") == ["All"] for r in api.writes())
    assert not [r for r in api.requests if r.method == "DELETE"]
    assert not [r for r in api.requests if r.query.get("labelSelector")]  # no prune: no lists
    assert api.get("v1", "Namespace", "gpuplex-acme") is None


def test_diff_shows_a_table_of_changes(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    api.put(objects.namespace())
    api.put(objects.config_map("gpuplex-settings", {"mode": "mps"}))
    api.put(objects.config_map("gpuplex-old", {}))

    result = gpuplex("diff", SPEC, "--kubeconfig", str(kubeconfig), "--context", "fake")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any(
        "change" in line and "gpuplex-settings" in line and "data.mode" in line for line in lines
    )
    assert any("prune" in line and "ConfigMap/gpuplex-acme/gpuplex-old" in line for line in lines)
    assert "Namespace/gpuplex-acme" not in result.stdout  # unchanged: only counted
    assert lines[-1] == "1 to change, 1 to prune, 1 unchanged"
    assert all(r.query.get("dryRun") == ["All"] for r in api.writes())
    assert api.get("v1", "ConfigMap", "gpuplex-old", "gpuplex-acme") is not None


def test_diff_shows_what_the_server_refuses_and_exits_as_apply_would(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    operator = objects.config_map("gpuplex-mig-parted-config", {}, namespace="gpu-operator")
    render.plan = lambda: Rendered([objects.namespace(), operator])

    diff = gpuplex("diff", SPEC, "--kubeconfig", str(kubeconfig))

    assert diff.exit_code == 1, diff.output
    lines = diff.stdout.splitlines()
    assert any(
        "refused" in line and "ConfigMap/gpu-operator/gpuplex-mig-parted-config" in line
        for line in lines
    )
    assert "1 to create, 1 refused" in diff.stdout  # the whole diff, then the error
    assert "error: apply would change nothing: the API server refuses" in diff.stderr
    assert "create namespace gpu-operator first" in diff.stderr

    apply = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig))

    assert apply.exit_code == 1
    assert "create namespace gpu-operator first" in apply.stderr
    assert "created" not in apply.stdout
    assert api.get("v1", "Namespace", "gpuplex-acme") is None  # the check stopped it all


def test_diff_of_a_terminating_namespace_exits_5(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    gone = objects.namespace()
    gone["metadata"]["deletionTimestamp"] = "2025-03-01T12:00:00Z"
    api.put(gone)

    diff = gpuplex("diff", SPEC, "--kubeconfig", str(kubeconfig))

    assert diff.exit_code == 5, diff.output
    assert diff.stdout.splitlines()[-1] == "1 refused, 1 unchanged"
    assert "namespace gpuplex-acme is still being deleted" in diff.stderr
    assert all(r.query.get("dryRun") == ["All"] for r in api.writes())


@pytest.mark.parametrize("command", ["apply", "diff"])
def test_a_closed_port_exits_3_with_the_address(
    render: FakeRender, tmp_path: Path, closed_port: int, command: str
) -> None:
    url = f"http://127.0.0.1:{closed_port}"
    config = write_kubeconfig(tmp_path / "kubeconfig", url)

    result = gpuplex(command, SPEC, "--kubeconfig", str(config))

    assert result.exit_code == 3
    assert f"error: cannot reach the Kubernetes API at {url}" in result.stderr
    assert "Connection refused" in result.stderr
    assert str(config) in result.stderr


def test_a_missing_kubeconfig_exits_3(render: FakeRender, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    result = gpuplex("apply", SPEC, "--kubeconfig", str(missing))
    assert result.exit_code == 3
    assert f"kubeconfig {missing} does not exist" in result.stderr


def test_no_kubeconfig_outside_a_cluster_exits_3(
    render: FakeRender, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import kube_config

    default = str(tmp_path / "home" / ".kube" / "config")
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", default)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)

    result = gpuplex("diff", SPEC)

    assert result.exit_code == 3
    assert f"no kubeconfig (looked for {default}) and not running inside a cluster" in result.stderr
    context = gpuplex("diff", SPEC, "--context", "prod")
    assert context.exit_code == 3
    assert "--context prod: no kubeconfig" in context.stderr


def test_an_unknown_context_or_a_broken_kubeconfig_exits_3(
    render: FakeRender, kubeconfig: Path, tmp_path: Path
) -> None:
    result = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig), "--context", "prod")
    assert result.exit_code == 3
    assert f"cannot use kubeconfig {kubeconfig}, context prod" in result.stderr
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    result = gpuplex("apply", SPEC, "--kubeconfig", str(broken))
    assert result.exit_code == 3
    assert f"cannot use kubeconfig {broken}" in result.stderr


def test_forbidden_exits_4_and_other_refusals_1(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    message = (
        'namespaces "gpuplex-acme" is forbidden: User "alice" cannot patch resource "namespaces" '
        'in API group "" at the cluster scope'
    )
    api.fail("PATCH", "/api/v1/namespaces/gpuplex-acme", status(403, "Forbidden", message))
    result = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 4
    assert "error: forbidden to patch namespaces 'gpuplex-acme'" in result.stderr
    assert 'User "alice" cannot patch resource' in result.stderr

    api.fail("PATCH", "/api/v1/namespaces/gpuplex-acme", status(500, "InternalError", "boom"))
    result = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 1
    assert "error: patch Namespace/gpuplex-acme: HTTP 500 InternalError: boom" in result.stderr


def test_a_plan_kubernetes_cannot_express_exits_2_before_any_request(
    render: FakeRender, api: FakeKubeApi, kubeconfig: Path
) -> None:
    def refuse() -> Rendered:
        raise KubeRenderError("node gpu-a: MPS beside MIG; put the MPS tenants in their own pool")

    render.plan = refuse
    result = gpuplex("apply", SPEC, "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 2
    assert "error: node gpu-a: MPS beside MIG" in result.stderr
    assert api.requests == []


def test_render_writes_a_stream_or_a_directory(render: FakeRender, tmp_path: Path) -> None:
    result = gpuplex("render", SPEC)
    assert result.exit_code == 0, result.output
    assert list(yaml.safe_load_all(result.stdout)) == render.plan().manifests
    assert "note: node gpu-a" in result.stderr

    result = gpuplex("render", SPEC, "-o", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "001-namespace-gpuplex-acme.yaml",
        "002-configmap-gpuplex-acme-gpuplex-settings.yaml",
    ]
    assert f"wrote 2 files to {tmp_path / 'out'}" in result.stderr


def test_self_options_come_from_image_and_set(render: FakeRender) -> None:
    result = gpuplex(
        "render", SPEC, "--self", "--image", "reg/gpuplex:2",
        "--set", "gateway_max_replicas=20",
        "--set", "gateway-autoscale=false",
        "--set", "dcgm_namespace=none",
        "--set", "metrics_from=10.0.0.0/8, 192.168.0.0/16",
        "--set", "monitor_labels=release=kps,team=ml",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    options = render.self_options
    assert options.image == "reg/gpuplex:2"
    assert options.gateway_max_replicas == 20
    assert options.gateway_autoscale is False
    assert options.dcgm_namespace is None
    assert options.metrics_from == ("10.0.0.0/8", "192.168.0.0/16")
    assert options.monitor_labels == {"release": "kps", "team": "ml"}
    assert yaml.safe_load(result.stdout)["metadata"]["name"] == "gpuplex-system"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--self", "--set", "colour=blue"], "KEY one of image,"),
        (["--self", "--set", "server_replicas=two"], "is not a whole number"),
        (["--self", "--set", "gateway_autoscale=maybe"], "is not a true or false"),
        (["--self", "--set", "monitor_labels=release"], "is not a list of k=v pairs"),
        (["--set", "image=x"], "--image and --set are options of --self"),
        (["--self", "--current", "plan.json"], "--self renders no plan"),
    ],
)
def test_bad_options_exit_2(render: FakeRender, args: list[str], message: str) -> None:
    result = gpuplex("render", SPEC, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.stderr.replace("│", "").split())
