"""One `Clock` protocol (gpuplex/clock.py): a component that reads the time takes a `Clock`, never a
bare function that returns seconds or a datetime. Thirteen constructors once took `clock=`
callables, each its own reading (monotonic here, wall-clock there, a datetime elsewhere), and a
test had to know which to hand over; a `Clock` carries all three, and the tests' one fake
(tests/clocks.py) answers each."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
#: A parameter with one of these in its name is a clock, whatever else it is called.
CLOCK_WORDS = ("clock", "now", "monotonic", "time_s")
#: What a time reading returns.
READINGS = ("float", "datetime")


def clock_callables(sources: Iterable[tuple[str, str]]) -> list[str]:
    """`file:line name: type` of every parameter or field (a dataclass's, say) named like a clock
    and typed `Callable[[], float]` or `Callable[[], datetime]`."""
    found = []
    bare = {f"Callable[[], {r}]" for r in READINGS}
    for name, source in sources:
        for node in ast.walk(ast.parse(source, filename=name)):
            named: list[tuple[str, ast.expr | None, int]] = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                a = node.args
                named = [
                    (x.arg, x.annotation, x.lineno)
                    for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]
                ]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                named = [(node.target.id, node.annotation, node.lineno)]
            for what, annotation, line in named:
                shown = ast.unparse(annotation) if annotation is not None else ""
                if any(word in what for word in CLOCK_WORDS) and shown in bare:
                    found.append(f"{name}:{line} {what}: {shown}")
    return found


def test_the_checker_finds_a_clock_callable_and_passes_a_clock() -> None:
    sources = [
        ("a.py", "def f(clock: Callable[[], float] = monotonic_s) -> None: ...\n"),
        ("b.py", "class A:\n    def __init__(self, *, now: Callable[[], datetime]) -> None: ...\n"),
        ("d.py", "@dataclass\nclass B:\n    now: Callable[[], datetime]\n"),
        (
            "c.py",
            "def f(clock: Clock = SYSTEM_CLOCK, busy_s: Callable[[], float] = g) -> None: ...\n",
        ),
    ]
    assert clock_callables(sources) == [
        "a.py:1 clock: Callable[[], float]",
        "b.py:2 now: Callable[[], datetime]",
        "d.py:3 now: Callable[[], datetime]",
    ]


def test_no_component_takes_its_clock_as_a_bare_callable() -> None:
    sources = [(str(p.relative_to(SRC)), p.read_text()) for p in sorted(SRC.rglob("*.py"))]
    found = clock_callables(sources)
    assert not found, "take a gpuplex.clock.Clock instead:\n" + "\n".join(found)
