"""House rule 9: one model per concept, so no class name is defined twice under `src/`. Two classes
with one name (a plan's `Target` and a scraper's `Target`) make every import a guess and every
search a list to sort through; each class gets a name that says what it is."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def class_definitions(sources: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Each class name, nested classes included, with the `file:line` of every definition."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for name, source in sources:
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{name}:{node.lineno}")
    return found


def duplicated(sources: Iterable[tuple[str, str]]) -> list[str]:
    """One line per class name defined more than once: the name and where each definition is."""
    return [
        f"{name}: {', '.join(places)}"
        for name, places in sorted(class_definitions(sources).items())
        if len(places) > 1
    ]


def src_sources() -> list[tuple[str, str]]:
    return [(str(path.relative_to(SRC)), path.read_text()) for path in sorted(SRC.rglob("*.py"))]


def test_the_checker_names_each_duplicate_with_its_places() -> None:
    sources = [
        ("a.py", "class Target:\n    pass\n\n\nclass Plan:\n    class Target:\n        pass\n"),
        ("b.py", "import enum\n\n\nclass Target(enum.Enum):\n    HOST = 'host'\n"),
        ("c.py", "class Plan:\n    pass\n"),
        ("d.py", "class Route:\n    pass\n"),
    ]
    assert duplicated(sources) == [
        "Plan: a.py:5, c.py:1",
        "Target: a.py:1, a.py:6, b.py:4",
    ]
    assert duplicated([("a.py", "class A:\n    pass\n"), ("b.py", "class B:\n    pass\n")]) == []


def test_src_has_classes_to_check() -> None:
    assert len(class_definitions(src_sources())) > 100


def test_no_class_name_is_defined_twice_under_src() -> None:
    twice = duplicated(src_sources())
    assert twice == [], "class names defined more than once under src/:\n" + "\n".join(twice)
