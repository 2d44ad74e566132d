"""Read gpuplex.yaml from disk: YAML with positions, then the pure validation in gpuplex.core.spec.

Every problem comes back as a SpecError naming file:line:column and the field path; nothing here
raises anything else for bad input.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.errors import SpecError, SpecProblem

Position = tuple[int, int]  # 1-based line and column


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[object, object]:
        seen: dict[object, Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {first})",
                    key_node.start_mark,
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def load_spec_file(path: Path) -> GpuplexSpec:
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise SpecError(
            source, [SpecProblem((), f"cannot read the file: {error.strerror}")]
        ) from None
    return load_spec_text(raw, source=source)


def load_spec_text(raw: bytes | str, *, source: str) -> GpuplexSpec:
    text = _decode(raw, source)
    data, positions = _parse_yaml(text, source)
    result = validate_spec(data)
    if isinstance(result, GpuplexSpec):
        return result
    raise SpecError(source, [_locate(problem, positions) for problem in result])


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


def _parse_yaml(text: str, source: str) -> tuple[object, dict[tuple[str | int, ...], Position]]:
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        message = f"invalid YAML: {error.problem or error.context}"
        if "\t" in text and "'\\t'" in str(error.problem):
            message += " (YAML indents with spaces; replace the tab)"
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecError(source, [SpecProblem((), message, line, column)]) from None
    except yaml.YAMLError as error:  # reader errors: control characters, binary data
        mark = getattr(error, "position", None)
        line = text.count("\n", 0, mark) + 1 if isinstance(mark, int) else None
        problem = SpecProblem((), f"invalid YAML: {error}".split("\n")[0], line, 1)
        raise SpecError(source, [problem]) from None
    finally:
        loader.dispose()
    positions: dict[tuple[str | int, ...], Position] = {}
    if node is not None:
        _record_positions(node, (), positions)
    return data, positions


def _record_positions(
    node: Node, path: tuple[str | int, ...], positions: dict[tuple[str | int, ...], Position]
) -> None:
    positions.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode):
                key_path = (*path, str(key_node.value))
                positions[key_path] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                _record_positions(value_node, key_path, positions)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _record_positions(item, (*path, index), positions)


def _locate(problem: SpecProblem, positions: dict[tuple[str | int, ...], Position]) -> SpecProblem:
    """Attach the position of the deepest part of the path that exists in the file."""
    path = problem.path
    for end in range(len(path), -1, -1):
        found = positions.get(path[:end])
        if found is not None:
            return SpecProblem(problem.path, problem.message, found[0], found[1])
    return SpecProblem(problem.path, problem.message, 1, 1)
