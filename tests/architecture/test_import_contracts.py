"""The import-linter contracts in `.importlinter` hold on the source tree, and they bite: a copy of the
tree with one forbidden import added breaks exactly the contract that forbids it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "gpuplex"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
VERDICT = re.compile(r"^(?P<name>.+) (?P<verdict>KEPT|BROKEN)( \(\d+ ignored imports?\))?$")


def lint_imports(root: Path, source: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with `root`'s `.importlinter`, on the `gpuplex` package under `source`."""
    environment = {**os.environ, "PYTHONPATH": str(source), "COLUMNS": "200"}
    return subprocess.run(  # noqa: S603 - the venv's own lint-imports, arguments written here
        [str(LINT_IMPORTS), "--no-cache", "--no-logo"],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def broken_contracts(output: str) -> set[str]:
    """The names of the contracts the report calls BROKEN (`name BROKEN (3 ignored imports)`)."""
    found = (VERDICT.match(line) for line in output.splitlines())
    return {match["name"] for match in found if match and match["verdict"] == "BROKEN"}


def test_the_source_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT, ROOT / "src")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
    kept = [m for m in map(VERDICT.match, done.stdout.splitlines()) if m and m["verdict"] == "KEPT"]
    assert len(kept) == 12


#: module to change, the import added to it, the contracts it must break
VIOLATIONS: list[tuple[str, str, set[str]]] = [
    (
        "core/plan/placer.py",
        "import sqlalchemy",
        {"core is pure: no I/O libraries", "sqlalchemy and alembic only in store"},
    ),
    (
        "core/spec/fields.py",
        "import gpuplex.core.plan",
        {"core in data-flow order: catalog, spec, plan, apply, meter, report", "no import cycles"},
    ),
    (
        "store/tokens.py",
        "import gpuplex.server.context",
        {"shell layers: cli, up, server, runtimes, store and observe, core", "no import cycles"},
    ),
    ("observe/metrics_token.py", "import kubernetes", {"kubernetes only in kube.apply"}),
    (
        "client/control_plane.py",
        "import gpuplex.cli.conventions",
        {
            "client is no UI: the CLI uses gpuplex.client, the client never imports the CLI",
            "shell layers: cli, up, server, runtimes, store and observe, core",
            "no import cycles",
        },
    ),
    (
        "client/control_plane.py",
        "import aiohttp",
        {"one HTTP client stack: aiohttp, in the gateway and gpuplex.http_client only"},
    ),
    ("server/oidc_code_flow.py", "import authlib.oauth2", {"authlib only in gpuplex.oauth_client"}),
    (
        "client/oidc/device_flow.py",
        "import rich.console",
        {"client is no UI: the CLI uses gpuplex.client, the client never imports the CLI"},
    ),
]


@pytest.mark.parametrize(
    ("module", "line", "contracts"), VIOLATIONS, ids=[v[0] for v in VIOLATIONS]
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contracts: set[str]
) -> None:
    shutil.copy(ROOT / ".importlinter", tmp_path / ".importlinter")
    copy = tmp_path / "src" / "gpuplex"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.js", "*.css"))
    changed = copy / module
    changed.write_text(changed.read_text() + f"\n{line}\n")
    done = lint_imports(tmp_path, tmp_path / "src")
    assert done.returncode == 1, done.stdout + done.stderr
    assert broken_contracts(done.stdout) == contracts, done.stdout
