"""The base install (`pip install gpuplex`, without the `kube` and `plots` extras) as a user has it:
the `gpuplex` command runs in a fresh interpreter whose imports of `kubernetes` and `matplotlib`
fail as they do where those packages are not installed (a finder first on sys.meta_path refuses
them). The commands that need an extra end with one line naming the `pip install` that adds it and
exit 2, the CLI's status for input to fix; every other command runs as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LAPTOP = ROOT / "examples" / "laptop.yaml"
CLUSTER = ROOT / "examples" / "kubernetes-cluster.yaml"
EXIT_BAD_INPUT = 2

#: The packages of the extras, hidden; the CLI's entry point then runs with the given arguments.
_WITHOUT_EXTRAS = """
import importlib.abc, json, sys

HIDDEN = {"kubernetes", "matplotlib"}

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.argv = ["gpuplex", *json.loads(sys.argv[1])]
if sys.argv[1:] == ["--probe"]:
    for name in sorted(HIDDEN):
        try:
            __import__(name)
        except ImportError:
            print(name, "hidden")
    raise SystemExit(0)
from gpuplex.cli.entry import main
main()
"""

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100\nn1,64000,262144,2,V100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    + "".join(f"p{i},1000,1024,1,500,,LS,Running,{i},100,{i}\n" for i in range(4))
)
TENANTS = """\
queues:
  organisations:
    - name: org
      teams:
        - name: team
          tenants:
            - {name: alice}
assign:
  - {tenant: alice, share: 1}
"""


def without_extras(*args: str | Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPLEX_HOME": str(home), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", _WITHOUT_EXTRAS, json.dumps([str(arg) for arg in args])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )


@pytest.fixture
def trace(tmp_path: Path) -> list[str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "tenants.yaml").write_text(TENANTS)
    return ["--nodes", str(tmp_path / "nodes.csv"), "--pods", str(tmp_path / "pods.csv")]


def test_the_packages_are_hidden(tmp_path: Path) -> None:
    done = without_extras("--probe", home=tmp_path)
    assert done.stdout.split("\n") == ["kubernetes hidden", "matplotlib hidden", ""], done.stderr


@pytest.mark.parametrize("verb", ["apply", "diff"])
def test_kube_apply_and_diff_say_to_install_the_kube_extra(verb: str, tmp_path: Path) -> None:
    done = without_extras("kube", verb, CLUSTER, home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"error: gpuplex kube {verb} needs the kubernetes client: pip install 'gpuplex[kube]'"
    )
    assert done.returncode == EXIT_BAD_INPUT


@pytest.mark.parametrize(
    ("extra_args", "png"),
    [([], "simulate.png"), (["--arrivals", "trace", "--tenants", "tenants.yaml"], "jobs.png")],
    ids=["inflate", "trace"],
)
def test_simulate_says_to_install_the_plots_extra_before_replaying(
    extra_args: list[str], png: str, trace: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    args = [str(tmp_path / a) if a == "tenants.yaml" else a for a in extra_args]
    done = without_extras("simulate", *trace, *args, "--out", out, home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == (
        f"error: gpuplex simulate's plot ({png}) needs matplotlib: pip install 'gpuplex[plots]'"
    )
    assert done.returncode == EXIT_BAD_INPUT
    assert not out.exists()  # refused before the replays, which write the CSV


@pytest.mark.parametrize(
    "args",
    [["--help"], ["validate", LAPTOP], ["plan", LAPTOP], ["kube", "render", CLUSTER]],
    ids=["help", "validate", "plan", "kube-render"],
)
def test_the_commands_without_an_extra_run_without_them(args: list[str], tmp_path: Path) -> None:
    done = without_extras(*args, home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr


def test_simulate_compare_isolation_draws_no_plot_and_needs_no_extra(
    trace: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = without_extras("simulate", *trace, "--compare-isolation", "--out", out, home=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert (out / "isolation.csv").read_text().startswith("mode,")
