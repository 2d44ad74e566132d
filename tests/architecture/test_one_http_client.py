"""gpuplex has one HTTP client stack (aiohttp: the gateway's proxying, and gpuplex.http_client for
every other call), so no module under src/ imports another client: not the standard library's
(urllib.request, http.client), not httpx, requests or urllib3 (but for the Kubernetes client's own
transport, whose errors kube.apply reads). `.importlinter` keeps aiohttp and
Authlib to their modules; this test covers the standard library's clients, which import-linter
cannot tell apart from urllib.parse or http.HTTPStatus."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "gpuplex"
OTHER_CLIENTS = ("urllib.request", "urllib.error", "http.client", "httpx", "requests", "urllib3")
#: The official Kubernetes client carries its calls on urllib3; kube.apply catches its errors.
ALLOWED = {"kube/apply.py": ["urllib3"]}


def imported_clients(source: str) -> list[str]:
    """The other HTTP clients a module imports, at any depth (a function's lazy import too)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found += [n for n in names if any(n == c or n.startswith(c + ".") for c in OTHER_CLIENTS)]
    return found


def test_no_module_imports_another_http_client() -> None:
    offenders = {
        str(path.relative_to(SRC)): clients
        for path in sorted(SRC.rglob("*.py"))
        if (clients := imported_clients(path.read_text(encoding="utf-8")))
    }
    assert offenders == ALLOWED


def test_the_check_sees_every_way_of_importing_one() -> None:
    lazy = "def f():\n    from urllib.request import urlopen\n"
    assert imported_clients(lazy) == ["urllib.request", "urllib.request.urlopen"]
    assert imported_clients("import http.client\n") == ["http.client"]
    assert imported_clients("from urllib import request\n") == ["urllib.request"]
    assert imported_clients("import httpx as h\n") == ["httpx"]
    assert imported_clients("import urllib.parse\nfrom http import HTTPStatus\n") == []
