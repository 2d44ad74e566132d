"""The dashboard's files are inside the package (so the wheel ships them) and complete: every
module and stylesheet the page loads is there, and nothing is fetched from another host."""

from __future__ import annotations

import re

import pytest

from gpuplex.server.app import DASHBOARD_DIR

pytestmark = pytest.mark.lane

_LOCAL_REF = re.compile(
    r"""(?:from\s+|import\s*\(?\s*|src=|href=)["'](\./)?([\w.-]+\.(?:js|css))["']"""
)
_REMOTE = re.compile(r"""https?://|//[a-z0-9.-]+\.[a-z]{2,}/""", re.IGNORECASE)


def test_every_file_the_page_loads_is_shipped() -> None:
    assert DASHBOARD_DIR.parent.name == "server"
    assert (DASHBOARD_DIR / "index.html").is_file()
    seen: set[str] = set()
    todo = ["index.html"]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = DASHBOARD_DIR / name
        assert path.is_file(), f"{name} is referenced but missing from {DASHBOARD_DIR}"
        todo.extend(match[1] for match in _LOCAL_REF.findall(path.read_text(encoding="utf-8")))
    assert {"app.js", "style.css", "gpumap.js", "charts.js", "panels.js"} <= seen
    unused = {p.name for p in DASHBOARD_DIR.iterdir() if p.is_file()} - seen
    assert unused == set(), f"files nothing loads: {unused}"


def test_no_file_reaches_another_host() -> None:
    for path in DASHBOARD_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        # the SVG namespace is a name, not a fetch
        text = text.replace("http://www.w3.org/2000/svg", "")
        assert _REMOTE.search(text) is None, f"{path.name} refers to another host"


def test_api_text_is_never_parsed_as_html() -> None:
    for path in DASHBOARD_DIR.glob("*.js"):
        text = path.read_text(encoding="utf-8")
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
            assert sink not in text, f"{path.name} uses {sink}"
