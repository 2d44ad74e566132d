"""The README and docs/ point only at what a clone of the repository has: every relative link
resolves to a file or folder inside it, and no page sends the reader to the folder beside the
repository that only the project's own machines have (`shared/`), except as where the openb trace,
which is not shipped, may be found (`../shared/data/openb`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: [text](target) or [text](target "title"), not images; fenced code is dropped first.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
OUTSIDE = re.compile(r"\bshared/(?!data/openb)")


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    targets = [match.group(1) for match in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves_inside_the_repository(page: Path) -> None:
    for target in relative_links(page):
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name}: {target} is outside the repository"
        assert path.exists(), f"{page.name}: {target} does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_page_names_files_outside_the_repository(page: Path) -> None:
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        assert not OUTSIDE.search(line), f"{page.name}:{number}: {line.strip()}"


def test_the_link_reader_finds_links_and_skips_urls_anchors_and_code() -> None:
    page = "[a](docs/x.md#y) ![img](i.png) [b](https://e.org) [c](#top)\n```\n[d](no.md)\n```\n"
    text = FENCE.sub("", page)
    assert [m.group(1) for m in LINK.finditer(text)] == ["docs/x.md#y", "https://e.org", "#top"]
