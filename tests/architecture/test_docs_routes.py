"""Every control-plane route that README.md, docs/ or a module under src/gpuplex names with its
method (`POST /api/v1/spec/apply`, `GET /auth/login`, or relative to the API, `PUT
/tenants/{t}/budget`) is one the control plane serves with that method. Routes of the gateway and
of the stand-in model servers (`/v1/...`, `/health`, `/metrics`) are not the control plane's and
are not read."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import gpuplex.server.routes
from gpuplex.server import sign_in
from gpuplex.server.app import API_PREFIX

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MODULES = sorted((ROOT / "src" / "gpuplex").rglob("*.py"))
WRITTEN = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE) (/[A-Za-z0-9_{}/.-]*)")
PARAMETER = re.compile(r"\{[^}]*\}")


def served_routes() -> list[tuple[str, str]]:
    """(method, path) of every route of the API's routers (under API_PREFIX) and the sign-in's."""
    routers = [
        (API_PREFIX, importlib.import_module(f"gpuplex.server.routes.{module.name}").router)
        for module in pkgutil.iter_modules(gpuplex.server.routes.__path__)
    ]
    routers.append(("", sign_in.router))
    return [
        (method, prefix + route.path)
        for prefix, router in routers
        for route in router.routes
        for method in getattr(route, "methods", ())
    ]


SERVED = served_routes()
#: the first segment of every API route, to tell the API's routes written without /api/v1
API_ROOTS = {path.removeprefix(API_PREFIX).split("/")[1] for _, path in SERVED} - {"auth"}


def _matches(served_path: str, written_path: str) -> bool:
    """Whether `written_path` is `served_path`, a `{...}` in either standing for one segment."""
    pattern = "/".join(
        "[^/]+" if PARAMETER.fullmatch(part) else re.escape(part) for part in served_path.split("/")
    )
    return re.fullmatch(pattern + "/?", PARAMETER.sub("x", written_path)) is not None


def unserved(method: str, written: str, served: list[tuple[str, str]]) -> str | None:
    """Why `method written` is not a served control-plane route; None when it is served, or is
    not the control plane's."""
    path = written.rstrip(".:")
    relative = path.split("/")[1] in API_ROOTS
    if not (path.startswith((f"{API_PREFIX}/", "/auth/")) or relative):
        return None
    full = API_PREFIX + path if relative else path
    methods = sorted({m for m, served_path in served if _matches(served_path, full)})
    if method in methods:
        return None
    return f"served only as {', '.join(methods)}" if methods else "no such route"


def test_the_routes_are_read() -> None:
    assert ("POST", f"{API_PREFIX}/spec/apply") in SERVED
    assert ("GET", "/auth/login") in SERVED
    assert {"tenants", "spec", "tokens"} <= API_ROOTS


def test_the_matcher_reads_parameters_and_skips_other_servers() -> None:
    served = [("GET", "/api/v1/spec"), ("POST", "/api/v1/spec/apply"), ("PUT", "/api/v1/t/{n}")]
    assert unserved("POST", "/api/v1/spec/apply.", served) is None
    assert unserved("PUT", "/api/v1/t/{tenant}", served) is None
    assert unserved("PUT", "/api/v1/t/acme", served) is None
    assert unserved("POST", "/api/v1/spec", served) == "served only as GET"
    assert unserved("GET", "/api/v1/nothing", served) == "no such route"
    assert unserved("POST", "/v1/chat/completions", served) is None


def wrong_routes(paths: list[Path]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {method} {written}: {problem}"
        for path in paths
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for method, written in WRITTEN.findall(line)
        if (problem := unserved(method, written, SERVED))
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_control_plane_route_a_page_names_is_served(page: Path) -> None:
    assert wrong_routes([page]) == []


def test_every_control_plane_route_the_source_names_is_served() -> None:
    assert wrong_routes(MODULES) == []
