"""The package picture in docs/architecture.md cannot go stale: every folder it draws exists, and
every package folder under src/gpuplex is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
INDENT = 2  # spaces per level of the picture


def picture(markdown: str) -> list[str]:
    """The lines of the first code block after the `## Package layout` heading."""
    section = markdown.split("\n## Package layout", 1)[1]
    block = section.split("```\n", 2)[1]
    return block.splitlines()


def drawn_folders(lines: list[str]) -> set[str]:
    """Every folder of the picture as a path from the repository root: a folder is a name ending in
    `/` at the start of a line; its parent is the nearest folder drawn one level up."""
    folders: set[str] = set()
    parents: list[str] = []  # parents[depth] = the folder open at that depth
    for line in lines:
        name = line.split(maxsplit=1)[0] if line.strip() else ""
        if not name.endswith("/"):
            continue
        spaces = len(line) - len(line.lstrip(" "))
        if spaces % INDENT:
            raise ValueError(f"{line!r}: indented by {spaces} spaces, not a multiple of {INDENT}")
        depth = spaces // INDENT
        if depth > len(parents):
            raise ValueError(f"{line!r}: drawn deeper than the folder above it")
        del parents[depth:]
        path = "/".join([*parents[-1:], name.rstrip("/")])
        parents.append(path)
        folders.add(path)
    return folders


def package_folders() -> set[str]:
    src = ROOT / "src" / "gpuplex"
    return {
        str(init.parent.relative_to(ROOT))
        for init in src.rglob("__init__.py")
        if "__pycache__" not in init.parts
    }


def test_the_reader_follows_the_indentation() -> None:
    lines = ["src/gpuplex/", "  core/    pure", "    plan/", "      placer.py", "  cli/", "tests/"]
    assert drawn_folders(lines) == {
        "src/gpuplex",
        "src/gpuplex/core",
        "src/gpuplex/core/plan",
        "src/gpuplex/cli",
        "tests",
    }
    with pytest.raises(ValueError, match="deeper"):
        drawn_folders(["src/", "      plan/"])


def test_every_drawn_folder_exists() -> None:
    missing = sorted(
        f for f in drawn_folders(picture(ARCHITECTURE.read_text())) if not (ROOT / f).is_dir()
    )
    assert missing == []


def test_every_package_folder_is_drawn() -> None:
    drawn = drawn_folders(picture(ARCHITECTURE.read_text()))
    assert sorted(package_folders() - drawn) == []
    assert "src/gpuplex/core/plan" in drawn  # the picture was found and read
