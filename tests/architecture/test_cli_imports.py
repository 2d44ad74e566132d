"""Every `gpuplex` command starts by importing the CLI; each command imports what it runs in its own
body, so a command does not pay for the libraries and models of the others (importing them all
made `gpuplex --help` and `gpuplex validate` spend about a second of CPU before doing anything;
bench/cli_start.py measures it, docs/benchmarks.md has the numbers).

The checks run each command in a fresh interpreter through typer's test runner and read what it
left in `sys.modules`; no timing."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

LAPTOP = str(Path(__file__).resolve().parents[2] / "examples" / "laptop.yaml")

#: What no light command may load: the store, the web stacks, the other processes' packages,
#: statements and budgets (`plan` prices a placement, nothing more), long commands' progress bars.
NEVER_AT_START = (
    "sqlalchemy",
    "alembic",
    "aiohttp",
    "fastapi",
    "starlette",
    "uvicorn",
    "granian",
    "httpx",
    "authlib",
    "redis",
    "psycopg",
    "prometheus_client",
    "kubernetes",
    "matplotlib",
    "numpy",
    "asyncio",
    "urllib.request",
    "gpuplex.server",
    "gpuplex.store",
    "gpuplex.gateway.serve",
    "gpuplex.host",
    "gpuplex.kube",
    "gpuplex.sim",
    "gpuplex.replay",
    "gpuplex.up",
    "gpuplex.isolation_bench",
    "gpuplex.observe",
    "gpuplex.oidc",
    "gpuplex.revision",
    "gpuplex.core.report.statement",
    "gpuplex.core.report.budget",
    "rich.progress",
)
#: What only the commands that read a spec load: the spec, plan and apply models and YAML.
SPEC_MODELS = (
    "pydantic",
    "yaml",
    "gpuplex.core.spec",
    "gpuplex.core.plan",
    "gpuplex.core.apply",
    "gpuplex.core.queues",
    "gpuplex.specfile",
)

LIGHT_COMMANDS = {
    "--help": (["--help"], NEVER_AT_START + SPEC_MODELS),
    "validate": (["validate", LAPTOP], NEVER_AT_START),
    "plan": (["plan", LAPTOP], NEVER_AT_START),
}

_PROBE = """
import json, sys
{before}
from typer.testing import CliRunner
from gpuplex.cli.main import app
done = CliRunner().invoke(app, json.loads(sys.argv[1]))
heavy = json.loads(sys.argv[2])
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps({{"exit_code": done.exit_code, "output": done.output, "loaded": loaded}}))
"""


@dataclass(frozen=True)
class Run:
    exit_code: int
    output: str
    loaded: list[str]

    def packages(self) -> set[str]:
        """The loaded modules as their top package, or gpuplex's as `gpuplex.layer.package`."""
        return {
            ".".join(m.split(".")[:3]) if m.startswith("gpuplex.") else m.split(".")[0]
            for m in self.loaded
        }


def loaded_by(args: list[str], heavy: tuple[str, ...], before: str = "") -> Run:
    """Run `gpuplex ARGS` in a fresh interpreter (after the statement `before`): its exit code,
    output, and which of the `heavy` modules it had loaded by the end."""
    done = subprocess.run(  # noqa: S603 - this interpreter, a script written above
        [sys.executable, "-c", _PROBE.format(before=before), json.dumps(args), json.dumps(heavy)],
        capture_output=True,
        text=True,
        check=True,
    )
    answer = json.loads(done.stdout.splitlines()[-1])
    return Run(int(answer["exit_code"]), str(answer["output"]), list(answer["loaded"]))


def test_importing_the_cli_loads_no_store_or_server_library() -> None:
    probe = (
        "import sys, gpuplex.cli.main\n"
        f"print(','.join(m for m in {NEVER_AT_START + SPEC_MODELS!r} if m in sys.modules))\n"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, a script written above
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ""


@pytest.mark.parametrize("command", sorted(LIGHT_COMMANDS))
def test_a_light_command_loads_only_what_it_runs(command: str) -> None:
    args, heavy = LIGHT_COMMANDS[command]
    run = loaded_by(args, heavy)
    assert run.exit_code == 0, run.output
    assert run.loaded == []


def test_validate_does_load_the_spec_and_plan_models() -> None:
    """The probe sees what a command loads: validate reads a spec and plans it."""
    run = loaded_by(["validate", LAPTOP], SPEC_MODELS)
    assert run.exit_code == 0, run.output
    assert {"pydantic", "yaml", "gpuplex.core.spec", "gpuplex.core.plan"} <= run.packages()


def test_the_probe_reports_a_heavy_module_loaded_on_the_way() -> None:
    run = loaded_by(["--help"], ("numpy", "gpuplex.core.plan"), before="import numpy")
    assert run.exit_code == 0, run.output
    assert run.packages() == {"numpy"}
