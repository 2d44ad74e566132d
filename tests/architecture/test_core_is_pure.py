"""House rule 1: gpuplex.core does no I/O, reads no clock or environment, makes no random ids, logs
nothing. import-linter checks third-party libraries; this test also covers the standard library."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuplex"

BANNED_IN_CORE = {
    "time", "uuid", "random", "os", "socket", "subprocess", "asyncio", "logging", "threading",
    "pathlib", "shutil", "tempfile", "secrets", "urllib", "http", "io",
    "sqlalchemy", "fastapi", "starlette", "httpx", "kubernetes", "pynvml", "prometheus_client",
    "redis", "anyio", "yaml", "typer", "rich",
}  # fmt: skip
#: Libraries allowed only in one module each (imported lazily there).
ONLY_IN = {"pynvml": "host/nvml_driver.py", "kubernetes": "kube/apply.py"}


def imported_roots(source: str) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


#: `datetime` values are fine in core (usage records carry them); reading the clock is not.
CLOCK_CALLS = {"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"}


def clock_calls(source: str) -> set[str]:
    return {
        node.func.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCK_CALLS
    }


def core_violations(source: str) -> set[str]:
    return (imported_roots(source) & BANNED_IN_CORE) | clock_calls(source)


def test_the_checker_catches_banned_imports() -> None:
    source = "import os\nfrom time import monotonic\nimport json\nfrom gpuplex.core import spec\n"
    assert core_violations(source) == {"os", "time"}
    assert core_violations("from datetime import datetime\nx = datetime.now()\n") == {"now"}


@pytest.mark.parametrize(
    "path", sorted((SRC / "core").rglob("*.py")), ids=lambda p: str(p.relative_to(SRC))
)
def test_core_module_imports_nothing_impure(path: Path) -> None:
    assert core_violations(path.read_text()) == set()


def test_core_has_modules() -> None:
    assert len(list((SRC / "core").rglob("*.py"))) > 10


@pytest.mark.parametrize("library", sorted(ONLY_IN))
def test_driver_libraries_stay_in_their_module(library: str) -> None:
    users = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if library in imported_roots(path.read_text())
    ]
    assert set(users) <= {ONLY_IN[library]}


def test_no_module_over_500_lines() -> None:
    long = [
        f"{path.relative_to(SRC)}: {n}"
        for path in SRC.rglob("*.py")
        if (n := len(path.read_text().splitlines())) > 500
    ]
    assert long == []
