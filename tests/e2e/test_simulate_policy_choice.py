"""From a replay of a fleet's own pods to the scheduler that places them, as an operator does it:
`gpuplex simulate --arrivals trace` (the installed `gpuplex` command, in its own process) prints
the policy gpuplex chooses and the line of gpuplex.yaml that sets it; that line, put into the
shipped Kubernetes example, validates, and `gpuplex kube render --self` then runs the scheduler
extender with that policy. The pods are a fleet where only `fgd-balanced` starts every pod, so the
choice is not the default one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.cli_runs import ROOT, run_subprocess
from tests.unit.replay import rare_fleet

#: The `gpuplex` command pip installed beside this interpreter (what a user types).
GPUPLEX = Path(sys.executable).with_name("gpuplex")
EXAMPLE = ROOT / "examples" / "kubernetes-cluster.yaml"
TENANTS = """\
queues:
  preemption: {min_runtime_s: 0}
  organisations:
    - name: org
      teams:
        - name: team
          tenants:
            - {name: alice}
            - {name: bob}
assign:
  - {tenant: alice, pattern: "a*"}
  - {tenant: bob, share: 1}
"""
CHOICE = re.compile(r"gpuplex's choice for this fleet: (\S+) \((.+?)\)\.")
LINE = re.compile(r"`(kubernetes: \{.+?\})`")


def simulate(folder: Path, pods: str = rare_fleet.PODS) -> str:
    (folder / "nodes.csv").write_text(rare_fleet.NODES)
    (folder / "pods.csv").write_text(pods)
    (folder / "tenants.yaml").write_text(TENANTS)
    args = ["simulate", "--arrivals", "trace", "--tenants", "tenants.yaml"]
    args += ["--nodes", "nodes.csv", "--pods", "pods.csv", "--out", "out"]
    done = subprocess.run(  # noqa: S603 - the installed command, fixed arguments
        [str(GPUPLEX), *args], capture_output=True, text=True, cwd=folder, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return " ".join(done.stdout.split())  # the console folds long lines at 80 columns


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra`'s keys set into it, maps merged key by key (as an operator adds a line)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def test_the_printed_choice_goes_into_gpuplex_yaml_and_the_extender_runs_it(
    tmp_path: Path,
) -> None:
    printed = simulate(tmp_path)
    choice = CHOICE.search(printed)
    assert choice is not None, printed
    assert choice.groups() == ("fgd-balanced", "fewest pods never started"), printed
    line = LINE.search(printed)
    assert line is not None, printed
    setting = yaml.safe_load(line.group(1))
    assert setting == {"kubernetes": {"scheduler": {"policy": "fgd-balanced"}}}, line.group(1)

    spec = tmp_path / "gpuplex.yaml"
    spec.write_text(yaml.safe_dump(merged(yaml.safe_load(EXAMPLE.read_text()), setting)))
    validated = run_subprocess("validate", spec)
    assert validated.exit_code == 0, validated.output

    rendered = run_subprocess("kube", "render", "--self", "--image", "example.org/gpuplex:1", spec)
    assert rendered.exit_code == 0, rendered.output
    manifests = [m for m in yaml.safe_load_all(rendered.stdout) if m]
    extenders = [
        container
        for m in manifests
        if m["kind"] == "Deployment"
        for container in m["spec"]["template"]["spec"]["containers"]
        if container["command"][:3] == ["gpuplex", "kube", "extender"]
    ]
    assert len(extenders) == 1, [m["metadata"]["name"] for m in manifests]
    command = extenders[0]["command"]
    assert command[command.index("--policy") + 1] == "fgd-balanced", command


def test_where_every_policy_is_level_the_choice_is_best_fit_and_the_line_says_so(
    tmp_path: Path,
) -> None:
    """The same fleet without alice's large pod: every policy starts every pod at once, so gpuplex
    keeps the extender's default, best-fit, and still prints the line that sets it."""
    printed = simulate(tmp_path, rare_fleet.PODS.replace("a0,120000,1024,4,", "a0,1000,1024,1,"))
    choice = CHOICE.search(printed)
    assert choice is not None, printed
    assert choice.group(1) == "best-fit", printed
    assert "`kubernetes: {scheduler: {policy: best-fit}}`" in printed, printed
