"""Every third-party package the code imports is declared in pyproject.toml, with bounds.

- `src/` imports only what `[project] dependencies` declares: the base install must run it. The
  one exception is a package of an optional extra (`kube`, `plots`) that `gpuplex.extras.EXTRAS`
  lists for it, imported inside a function: the command that runs that function calls
  `require_extra` first, which says what to install when the package is missing.
- `tests/` and `bench/` may also use the `dev` extra (what `make test` installs), which includes
  the other extras (`gpuplex[kube,plots]`: its requirements are read as theirs).
- An import guarded by `except ImportError` is optional by design: it is declared in some group,
  or named in `NOT_DECLARED` with the reason.
- Every declared requirement has a lower and an upper bound, and the installed version is inside
  them.
- requirements/dev.lock (what `make test` installs) pins every declared requirement within its
  bounds: a dependency added or re-bounded without `make lock` fails here.

Import names are mapped to distributions with `importlib.metadata.packages_distributions()` (`yaml`
is PyYAML, `pynvml` is nvidia-ml-py)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from gpuplex.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "dev.lock"
FIRST_PARTY = {"gpuplex", "tests", "bench", "__future__"}
PROJECT = canonicalize_name("gpuplex")

#: Imports that no group declares, on purpose; each is guarded where it is imported.
NOT_DECLARED = {
    "torch": "the isolation benchmark's GPU loop (gpuplex.isolation_bench.loop) on a GPU machine "
    "only; without it the command says how to install it",
}
#: Files that another interpreter runs, with its own packages.
RUN_ELSEWHERE = {
    "tests/vllm_real/model_builder.py": "run by the vLLM venv's Python (tests/vllm_real/install.py)",
}


@dataclass(frozen=True)
class Import:
    path: str
    line: int
    root: str
    guarded: bool  # inside a `try` that catches ImportError
    lazy: bool = False  # inside a function: imported when it runs, not with the module


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {kind.id for kind in kinds if isinstance(kind, ast.Name)}
    return bool(names & {"ImportError", "ModuleNotFoundError"})


def third_party_imports(
    source: str, path: str, local: frozenset[str] = frozenset()
) -> list[Import]:
    """The absolute imports of `source` that are neither the standard library, gpuplex's own
    packages nor a module of `local` (scripts beside each other)."""
    tree = ast.parse(source)
    guarded_nodes: set[int] = set()
    lazy_nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for statement in node.body:
                guarded_nodes.update(id(inner) for inner in ast.walk(statement))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lazy_nodes.update(id(inner) for inner in ast.walk(node) if inner is not node)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            root = name.split(".")[0]
            if root in sys.stdlib_module_names or root in FIRST_PARTY or root in local:
                continue
            found.append(
                Import(path, node.lineno, root, id(node) in guarded_nodes, id(node) in lazy_nodes)
            )
    return found


def declared_groups() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    groups = {"dependencies": [Requirement(text) for text in project["dependencies"]]}
    for extra in extras:
        groups[extra] = expanded(extra, extras)
    return groups


def expanded(extra: str, extras: dict[str, list[str]]) -> list[Requirement]:
    """The requirements of `extra`, with a requirement of gpuplex's own extras
    (`gpuplex[kube,plots]`) replaced by theirs."""
    out = []
    for requirement in (Requirement(text) for text in extras[extra]):
        if canonicalize_name(requirement.name) == PROJECT:
            for other in sorted(requirement.extras):
                out += expanded(other, extras)
        else:
            out.append(requirement)
    return out


def names_of(requirements: list[Requirement]) -> set[NormalizedName]:
    return {canonicalize_name(requirement.name) for requirement in requirements}


@functools.cache
def installed_providers() -> dict[str, list[str]]:
    """Import name -> the installed distributions that provide it (reads every RECORD: once)."""
    return dict(importlib.metadata.packages_distributions())


def distributions_of(root: str) -> set[NormalizedName]:
    """The installed distributions that provide import name `root`; where none is installed,
    the distribution of the same name (which the declared names may still match)."""
    provided = installed_providers().get(root, [])
    return {canonicalize_name(name) for name in provided} or {canonicalize_name(root)}


def undeclared(found: list[Import], groups: dict[str, list[Requirement]]) -> list[str]:
    """One line per import that its place may not use, naming the file, line and package."""
    main = names_of(groups["dependencies"])
    dev = main | names_of(groups.get("dev", []))
    anywhere = set().union(*(names_of(group) for group in groups.values()))
    problems = []
    for imported in found:
        if imported.guarded:
            allowed, where = anywhere, "any group of pyproject.toml (or NOT_DECLARED here)"
        elif imported.path.startswith("src/") and imported.lazy:
            allowed = main | extra_names(imported.root, groups)
            where = "[project] dependencies, nor in an extra gpuplex.extras.EXTRAS lists it for"
        elif imported.path.startswith("src/"):
            allowed, where = main, "[project] dependencies"
        else:
            allowed, where = dev, "[project] dependencies or the dev extra"
        dists = distributions_of(imported.root)
        if dists & allowed or (imported.guarded and imported.root in NOT_DECLARED):
            continue
        problems.append(
            f"{imported.path}:{imported.line} imports {imported.root} "
            f"(distribution {', '.join(sorted(dists))}), not declared in {where}"
        )
    return problems


def extra_names(root: str, groups: dict[str, list[Requirement]]) -> set[NormalizedName]:
    """The distributions of the extras that gpuplex.extras.EXTRAS lists import `root` for: what
    src/ may import inside a function, behind `require_extra`."""
    return set().union(
        *(names_of(groups.get(name, [])) for name, extra in EXTRAS.items() if root in extra.imports)
    )


def project_imports() -> Iterator[Import]:
    bench_scripts = frozenset(path.stem for path in (ROOT / "bench").glob("*.py"))
    for top in ("src", "tests", "bench"):
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "node_modules" in path.parts or relative in RUN_ELSEWHERE:
                continue
            local = bench_scripts if top == "bench" else frozenset()
            yield from third_party_imports(path.read_text(), relative, local)


def test_the_checker_tells_each_place_what_it_may_import() -> None:
    groups = {
        "dependencies": [Requirement("pyyaml>=6,<7")],
        "dev": [Requirement("pytest>=8,<10")],
        "extra": [Requirement("hypothesis>=6,<7")],
    }
    source = (
        "import os\nimport yaml\nimport pytest\nfrom gpuplex import errors\n"
        "try:\n    import hypothesis\nexcept ImportError:\n    hypothesis = None\n"
    )
    in_src = third_party_imports(source, "src/gpuplex/x.py")
    assert [(i.root, i.line, i.guarded) for i in in_src] == [
        ("yaml", 2, False),
        ("pytest", 3, False),
        ("hypothesis", 6, True),
    ]
    assert undeclared(in_src, groups) == [
        "src/gpuplex/x.py:3 imports pytest (distribution pytest), not declared in "
        "[project] dependencies"
    ]
    assert undeclared(third_party_imports(source, "tests/x.py"), groups) == []
    assert undeclared(third_party_imports("import nowhere_declared\n", "bench/x.py"), groups) == [
        "bench/x.py:1 imports nowhere_declared (distribution nowhere-declared), not declared in "
        "[project] dependencies or the dev extra"
    ]
    assert third_party_imports("import sibling\n", "bench/x.py", frozenset({"sibling"})) == []


def test_src_may_import_an_extras_package_only_inside_a_function() -> None:
    groups = {
        "dependencies": [Requirement("pyyaml>=6,<7")],
        "kube": [Requirement("kubernetes>=37,<38")],
        "dev": [Requirement("kubernetes>=37,<38"), Requirement("pytest>=8,<10")],
    }
    source = "import kubernetes\n\ndef connect():\n    import kubernetes\n    import pytest\n"
    found = third_party_imports(source, "src/gpuplex/x.py")
    assert [(i.root, i.line, i.lazy) for i in found] == [
        ("kubernetes", 1, False),
        ("kubernetes", 4, True),
        ("pytest", 5, True),
    ]
    assert undeclared(found, groups) == [
        "src/gpuplex/x.py:1 imports kubernetes (distribution kubernetes), not declared in "
        "[project] dependencies",
        "src/gpuplex/x.py:5 imports pytest (distribution pytest), not declared in "
        "[project] dependencies, nor in an extra gpuplex.extras.EXTRAS lists it for",
    ]


def test_an_extra_of_the_project_itself_reads_as_its_requirements() -> None:
    extras = {
        "kube": ["kubernetes>=37,<38"],
        "plots": ["matplotlib>=3.8,<4"],
        "dev": ["gpuplex[kube,plots]", "pytest>=8,<10"],
    }
    assert [str(r) for r in expanded("dev", extras)] == [
        "kubernetes<38,>=37",
        "matplotlib<4,>=3.8",
        "pytest<10,>=8",
    ]


def test_the_extras_a_command_checks_for_are_the_extras_pyproject_declares() -> None:
    """gpuplex.extras.EXTRAS names, per extra, the import names require_extra looks up: they are
    the packages pyproject.toml declares in that extra, and the dev extra has them all."""
    groups = declared_groups()
    for name, extra in EXTRAS.items():
        assert name in groups, f"pyproject.toml declares no extra {name!r}"
        provided = set().union(*(distributions_of(root) for root in extra.imports))
        assert provided == names_of(groups[name]), (name, sorted(provided))
        assert names_of(groups[name]) <= names_of(groups["dev"]), f"dev lacks the {name} extra"
    assert not names_of(groups["dependencies"]) & set().union(
        *(names_of(groups[name]) for name in EXTRAS)
    ), "a package is both a base dependency and an extra's"


def test_every_third_party_import_is_declared_where_it_is_used() -> None:
    problems = undeclared(list(project_imports()), declared_groups())
    assert not problems, "undeclared third-party imports:\n" + "\n".join(problems)


def test_names_left_undeclared_on_purpose_are_still_imported_and_still_undeclared() -> None:
    anywhere = set().union(*(names_of(group) for group in declared_groups().values()))
    imported = {found.root for found in project_imports()}
    for root in NOT_DECLARED:
        assert root in imported, f"{root} is no longer imported: remove it from NOT_DECLARED"
        assert not distributions_of(root) & anywhere, f"{root} is declared: remove it here"
    for path in RUN_ELSEWHERE:
        assert (ROOT / path).is_file(), f"{path} is gone: remove it from RUN_ELSEWHERE"


def bounds_missing(requirement: Requirement) -> list[str]:
    operators = {spec.operator for spec in requirement.specifier}
    missing = []
    if not operators & {">=", ">", "==", "~="}:
        missing.append("a lower bound")
    if not operators & {"<", "<=", "==", "~="}:
        missing.append("an upper bound")
    return missing


def test_the_bound_check_reads_both_ends() -> None:
    assert bounds_missing(Requirement("uvicorn[standard]>=0.54,<0.55")) == []
    assert bounds_missing(Requirement("types-PyYAML")) == ["a lower bound", "an upper bound"]
    assert bounds_missing(Requirement("pyyaml>=6.0")) == ["an upper bound"]


@pytest.mark.parametrize(
    "requirement",
    [requirement for group in declared_groups().values() for requirement in group],
    ids=str,
)
def test_each_dependency_is_bounded_and_installed_within_its_bounds(
    requirement: Requirement,
) -> None:
    assert bounds_missing(requirement) == [], f"{requirement} needs {bounds_missing(requirement)}"
    try:
        installed = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            f"{requirement.name} is not installed: make test installs requirements/dev.lock"
        )
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{requirement.name} {installed} is installed, outside {requirement}: reinstall from "
        "requirements/dev.lock, or change the bound and run `make lock`"
    )


def locked_versions(text: str) -> dict[NormalizedName, str]:
    """`name==version` lines of a pip requirements file (hashes and comments aside)."""
    pins = {}
    for line in text.splitlines():
        if line[:1].isalnum() and "==" in line:
            requirement = Requirement(line.rstrip(" \\"))
            (spec,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def lock_problems(
    groups: dict[str, list[Requirement]], pins: dict[NormalizedName, str]
) -> list[str]:
    problems = []
    for requirement in (requirement for group in groups.values() for requirement in group):
        pinned = pins.get(canonicalize_name(requirement.name))
        if pinned is None:
            problems.append(f"{requirement.name} is not in requirements/dev.lock")
        elif not requirement.specifier.contains(pinned, prereleases=True):
            problems.append(
                f"requirements/dev.lock pins {requirement.name} {pinned}, outside {requirement}"
            )
    return problems


def test_the_lock_check_reads_pins_and_bounds() -> None:
    pins = locked_versions(
        "# made by make lock\nuvicorn==0.54.0 \\\n    --hash=sha256:ab\n    # via gpuplex\n"
        "colorama==0.4.6 ; sys_platform == 'win32' \\\n"
    )
    assert pins == {"uvicorn": "0.54.0", "colorama": "0.4.6"}
    groups = {
        "dependencies": [Requirement("uvicorn[standard]>=0.55,<0.56"), Requirement("rich<16")]
    }
    assert lock_problems(groups, pins) == [
        "requirements/dev.lock pins uvicorn 0.54.0, outside uvicorn[standard]<0.56,>=0.55",
        "rich is not in requirements/dev.lock",
    ]


def test_the_lock_pins_every_declared_dependency_within_its_bounds() -> None:
    problems = lock_problems(declared_groups(), locked_versions(LOCK.read_text()))
    assert not problems, "run `make lock`:\n" + "\n".join(problems)
