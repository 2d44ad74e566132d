"""Read gpuplex.yaml from disk: YAML with positions, then the pure validation in gpuplex.core.spec.

Every problem comes back as a SpecError naming file:line:column and the field path; nothing here
raises anything else for bad input. `load_yaml_file` does the same for any other YAML file gpuplex
reads (the queue file of `gpuplex queues`) with that file's own pure validator.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.errors import FieldPath, SpecError, SpecProblem

Position = tuple[int, int]  # 1-based line and column
Parsed = TypeVar("Parsed")


_BOOL_TAG = "tag:yaml.org,2002:bool"
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def make_spec_loader(base: type[yaml.SafeLoader]) -> type[yaml.SafeLoader]:
    """A safe loader with YAML 1.2 booleans: only true and false are booleans, so `mig: on` and
    `mig: off` stay text (YAML 1.1 reads on/off/yes/no as booleans). Pydantic still reads
    `preemption: yes` as a boolean where the field is one."""

    class SpecLoader(base):  # type: ignore[valid-type,misc]
        pass

    loader: type[yaml.SafeLoader] = SpecLoader
    loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(
        _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    return loader


#: libyaml's parser when PyYAML was built with it (its wheels are): ~20x faster on large specs.
#: The pure-Python parser behaves the same; tests run the bad-input corpus through both.
SPEC_LOADER = make_spec_loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_spec_file(path: Path) -> GpuplexSpec:
    return load_yaml_file(path, validate_spec)


def load_spec_text(raw: bytes | str, *, source: str) -> GpuplexSpec:
    return load_yaml_text(raw, validate_spec, source=source)


def load_yaml_file(path: Path, validate: Callable[[object], Parsed | list[SpecProblem]]) -> Parsed:
    """Read a YAML file and validate it; any problem is a SpecError with file:line:column."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SpecError(
            source, [SpecProblem((), f"cannot read the file: {error.strerror}")]
        ) from None
    return load_yaml_text(raw, validate, source=source)


def load_yaml_text(
    raw: bytes | str,
    validate: Callable[[object], Parsed | list[SpecProblem]],
    *,
    source: str,
) -> Parsed:
    """`validate` the YAML in `raw`: its value, or a SpecError placing each problem in `source`."""
    text = _decode(raw, source)
    data, positions = _parse_yaml(text, source)
    result = validate(data)
    if isinstance(result, list):  # the validator's problems (a validated value is never a list)
        raise SpecError(source, [_locate(problem, positions) for problem in result])
    return result


def locate_in_file(path: Path, problems: Sequence[SpecProblem]) -> list[SpecProblem]:
    """`problems` about the YAML file at `path` (one that was read and validated already: a
    warning's), each placed at the line and column of its field."""
    if not problems:
        return []
    return locate_in_text(path.read_bytes(), str(path), problems)


def locate_in_text(
    raw: bytes | str, source: str, problems: Sequence[SpecProblem]
) -> list[SpecProblem]:
    """`problems` about YAML text already read and validated (from `source`), each placed at the
    line and column of its field."""
    if not problems:
        return []
    _, positions = _parse_yaml(_decode(raw, source), source)
    return [_locate(problem, positions) for problem in problems]


def _decode(raw: bytes | str, source: str) -> str:
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        problem = SpecProblem(
            (),
            f"not UTF-8 text (byte 0x{raw[error.start]:02x}): is this a YAML file?",
            line,
            column,
        )
        raise SpecError(source, [problem]) from None


def _parse_yaml(text: str, source: str) -> tuple[object, dict[FieldPath, Position]]:
    loader: yaml.SafeLoader | None = None
    try:
        loader = SPEC_LOADER(text)  # the reader rejects unprintable characters here
        node = loader.get_single_node()
        positions: dict[FieldPath, Position] = {}
        problems: list[SpecProblem] = []
        if node is not None:
            _walk(node, positions, problems)
        if problems:
            raise SpecError(source, problems)
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = f"invalid YAML: {error.problem or error.context}"
        if "nesting depth" in str(error.problem):
            # PyYAML 6.0.4 and later stop deep nesting themselves, in their own words
            message = f"invalid YAML: nested too deeply to read ({error.problem})"
        elif error.problem and error.context and error.context_mark:
            # e.g. an unclosed bracket: the problem is found lines after the bracket opened
            message += f" ({error.context} that starts on line {error.context_mark.line + 1})"
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        if mark is not None and "\t" in _line_at(text, mark.line):
            message += " (YAML indents with spaces; replace the tab)"
        raise SpecError(source, [SpecProblem((), message, line, column)]) from None
    except yaml.YAMLError as error:  # reader errors: control characters, binary data
        index = getattr(error, "position", None)
        line, column = (None, None)
        if isinstance(index, int):
            line = text.count("\n", 0, index) + 1
            column = index - (text.rfind("\n", 0, index) + 1) + 1
        message = f"invalid YAML: {error}".split("\n")[0] + " (is this a text file?)"
        raise SpecError(source, [SpecProblem((), message, line, column)]) from None
    except RecursionError:  # the pure-Python parser's limit, before our depth check sees the tree
        get_mark = getattr(loader, "get_mark", None)
        mark = get_mark() if get_mark is not None else None
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = SpecProblem((), "invalid YAML: nested too deeply to read", line, column)
        raise SpecError(source, [problem]) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, positions


#: gpuplex.yaml is a handful of levels deep; anything past this is a mistake or an attack.
MAX_DEPTH = 64


def _walk(root: Node, positions: dict[FieldPath, Position], problems: list[SpecProblem]) -> None:
    """Record where each path starts and refuse keys that are duplicated or not text.

    Iterative, in document order. Each node is entered once: an alias repeats a node, and aliases
    may nest (a "billion laughs") or point back at their own anchor."""
    seen: set[int] = set()
    stack: list[tuple[Node, FieldPath]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        positions.setdefault(path, _position(node))
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(path) > MAX_DEPTH:
            message = f"invalid YAML: nested too deeply (more than {MAX_DEPTH} levels)"
            problems.append(SpecProblem((), message, *_position(node)))
            return
        children: list[tuple[Node, FieldPath]] = []
        if isinstance(node, MappingNode):
            children = _mapping_children(node, path, positions, problems)
        elif isinstance(node, SequenceNode):
            children = [(item, (*path, index)) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))


def _mapping_children(
    node: MappingNode,
    path: FieldPath,
    positions: dict[FieldPath, Position],
    problems: list[SpecProblem],
) -> list[tuple[Node, FieldPath]]:
    children: list[tuple[Node, FieldPath]] = []
    first_lines: dict[str, int] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:
            continue  # `<<: *defaults`: the constructor merges these
        line, column = _position(key_node)
        if not isinstance(key_node, ScalarNode) or key_node.tag != _STR_TAG:
            message = (
                f"key {key_node.value} is not text: write keys as names, quoted if need be"
                if isinstance(key_node, ScalarNode)
                else "a list or mapping cannot be a key: write keys as names"
            )
            problems.append(SpecProblem(path, message, line, column))
            continue
        key_path = (*path, key_node.value)
        if key_node.value in first_lines:
            first = first_lines[key_node.value]
            message = f"duplicate key {key_node.value!r} (first on line {first}): keep one"
            problems.append(SpecProblem(key_path, message, line, column))
            continue
        first_lines[key_node.value] = line
        positions[key_path] = (line, column)
        children.append((value_node, key_path))
    return children


def _line_at(text: str, index: int) -> str:
    lines = text.splitlines()
    return lines[index] if 0 <= index < len(lines) else ""


def _position(node: Node) -> Position:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _locate(problem: SpecProblem, positions: dict[FieldPath, Position]) -> SpecProblem:
    """Attach the position of the deepest part of the path that exists in the file."""
    path = problem.path
    for end in range(len(path), -1, -1):
        found = positions.get(path[:end])
        if found is not None:
            return SpecProblem(problem.path, problem.message, found[0], found[1])
    return SpecProblem(problem.path, problem.message, 1, 1)
