"""The error tree drawn in gpuplex/errors.py's docstring is the tree the code defines: every class
under src/gpuplex that derives from `GpuplexError`, in errors.py or elsewhere, is drawn under the
class it derives from, and nothing else is drawn."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import gpuplex.errors

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "gpuplex"
ERRORS = SRC / "errors.py"
ROOT_ERROR = "GpuplexError"
#: `├── Name   words` or `│   └── Name   words`: a branch's depth is where its `──` starts, over 4.
BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>[A-Za-z]+)\b")


def drawn_tree(docstring: str) -> dict[str, tuple[str, int]]:
    """class -> (the class it is drawn under, its line in the docstring), for the picture that
    starts at the line holding only the root's name."""
    lines = docstring.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == ROOT_ERROR)
    indent = len(lines[start]) - len(lines[start].lstrip())
    parents = [ROOT_ERROR]  # parents[depth]: the class open at that depth
    drawn: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        found = BRANCH.match(line[indent:])
        if found is None:
            if not line.strip():
                break
            raise ValueError(f"docstring line {number}: {line!r} is not a branch of the tree")
        depth = len(found["indent"]) // 4
        if len(found["indent"]) % 4 or depth >= len(parents):
            raise ValueError(f"docstring line {number}: {line!r} is not under a class above it")
        del parents[depth + 1 :]
        name = found["name"]
        if name in drawn:
            raise ValueError(f"docstring line {number}: {name} is drawn twice")
        drawn[name] = (parents[depth], number)
        parents.append(name)
    return drawn


def _base_names(node: ast.ClassDef, aliases: dict[str, str]) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(aliases.get(base.id, base.id))
        elif isinstance(base, ast.Attribute):  # errors.StoreError
            names.append(base.attr)
    return names


def _classes(path: Path, src: Path) -> dict[str, tuple[list[str], str]]:
    """class -> (the names of its bases, where it is defined), for every class in one module."""
    module = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases = {
        alias.asname: alias.name
        for node in ast.walk(module)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname
    }
    return {
        node.name: (_base_names(node, aliases), f"{path.relative_to(src.parent)}:{node.lineno}")
        for node in ast.walk(module)
        if isinstance(node, ast.ClassDef)
    }


def defined_tree(src: Path) -> dict[str, tuple[str, str]]:
    """class -> (the class of the tree it derives from, where it is defined), for every class under
    `src` that derives from the root, read from the source (no module is imported). Only modules
    whose text names a class of the tree found so far are parsed (a subclass names its base)."""
    texts = {path: path.read_text(encoding="utf-8") for path in sorted(src.rglob("*.py"))}
    bases: dict[str, tuple[list[str], str]] = {}
    tree: dict[str, tuple[str, str]] = {}
    parsed: set[Path] = set()
    while True:
        names = {ROOT_ERROR, *tree}
        todo = [p for p, text in texts.items() if p not in parsed and any(n in text for n in names)]
        if not todo:
            return tree
        for path in todo:
            for name, found in _classes(path, src).items():
                bases.setdefault(name, found)
            parsed.add(path)
        grown = True
        while grown:
            grown = False
            for name, (base_names, where) in bases.items():
                parent = next((b for b in base_names if b == ROOT_ERROR or b in tree), None)
                if parent is not None and name not in tree and name != ROOT_ERROR:
                    tree[name] = (parent, where)
                    grown = True


def test_the_reader_follows_the_branches() -> None:
    picture = """Tree.

    GpuplexError
    ├── SpecError            words
    │   └── JobFileError     words
    ├── KubeApiError
    │   ├── KubeForbidden    words
    │   └── KubeRetryLater
    └── RequestRefused       words:
        └── ApiError         words

    After."""
    assert drawn_tree(picture) == {
        "SpecError": (ROOT_ERROR, 4),
        "JobFileError": ("SpecError", 5),
        "KubeApiError": (ROOT_ERROR, 6),
        "KubeForbidden": ("KubeApiError", 7),
        "KubeRetryLater": ("KubeApiError", 8),
        "RequestRefused": (ROOT_ERROR, 9),
        "ApiError": ("RequestRefused", 10),
    }
    with pytest.raises(ValueError, match="not under a class"):
        drawn_tree("GpuplexError\n│   └── Orphan\n")


def test_the_source_reader_finds_subclasses_in_any_module_and_by_alias(tmp_path: Path) -> None:
    (tmp_path / "errors.py").write_text(
        "class GpuplexError(Exception): ...\nclass StoreError(GpuplexError): ...\n"
    )
    (tmp_path / "kube.py").write_text(
        "from errors import StoreError as Base\nimport errors\n"
        "class Gone(Base): ...\nclass Other(errors.GpuplexError): ...\nclass Plain: ...\n"
    )
    assert defined_tree(tmp_path) == {
        "StoreError": (ROOT_ERROR, f"{tmp_path.name}/errors.py:2"),
        "Gone": ("StoreError", f"{tmp_path.name}/kube.py:3"),
        "Other": (ROOT_ERROR, f"{tmp_path.name}/kube.py:4"),
    }


def test_every_error_class_is_drawn_under_its_base_in_the_errors_docstring() -> None:
    docstring = gpuplex.errors.__doc__ or ""
    drawn = drawn_tree(docstring)
    defined = defined_tree(SRC)
    assert "ApiProblem" in defined  # the source was read, beyond errors.py
    assert "KubeForbidden" in defined
    missing = sorted(
        f"{name} (under {parent}, {where})"
        for name, (parent, where) in defined.items()
        if name not in drawn
    )
    extra = sorted(
        f"{name} (docstring line {line})"
        for name, (_, line) in drawn.items()
        if name not in defined
    )
    misplaced = sorted(
        f"{name}: drawn under {drawn[name][0]} (docstring line {drawn[name][1]}), derives from {parent}"
        for name, (parent, _) in defined.items()
        if name in drawn and drawn[name][0] != parent
    )
    assert missing == [], f"src/gpuplex/errors.py's docstring does not draw {missing}"
    assert extra == [], (
        f"src/gpuplex/errors.py's docstring draws classes that do not exist: {extra}"
    )
    assert misplaced == [], (
        f"src/gpuplex/errors.py's docstring draws in the wrong place: {misplaced}"
    )
