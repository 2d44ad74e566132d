"""Turn parsed YAML data into a GpuplexSpec, or into a readable list of problems."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.errors import SpecProblem


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """' (did you mean "quota"?)' when a choice is close, else ''."""
    options = sorted(choices)  # sets come in hash order: sort so the hint never changes
    lowered = {option.lower(): option for option in options}
    if word.lower() in lowered:
        return f' (did you mean "{lowered[word.lower()]}"?)'
    prefixed = [option for option in options if option.lower().startswith(word.lower())]
    if word and prefixed:
        return f' (did you mean "{prefixed[0]}"?)'  # "H100" -> the first H100 in catalog order
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def parse_spec(data: object) -> GpuplexSpec | list[SpecProblem]:
    """Validate the shape and field values; cross-field rules come after (see rules.check_spec)."""
    if data is None:
        return [SpecProblem((), "the file is empty: expected a mapping with fleet and tenants")]
    if not isinstance(data, dict):
        kind = type(data).__name__
        return [
            SpecProblem((), f"expected a mapping (fleet:, tenants:, ...) at the top, got {kind}")
        ]
    try:
        return GpuplexSpec.model_validate(data)
    except ValidationError as error:
        return validation_problems(error, GpuplexSpec)


def validation_problems(error: ValidationError, root: type[BaseModel]) -> list[SpecProblem]:
    """A pydantic error on `root` as readable problems, each with its field path."""
    return [_problem(detail, root) for detail in error.errors(include_url=False)]


def _problem(detail: ErrorDetails, root: type[BaseModel]) -> SpecProblem:
    loc = tuple(detail["loc"])
    kind = detail["type"]
    message = detail["msg"].removeprefix("Value error, ")
    if kind == "extra_forbidden" and loc:
        key = str(loc[-1])
        known = _field_names(_model_at(root, loc[:-1]))
        message = f"unknown key {key!r}{did_you_mean(key, known)}"
        if known:
            message += f"; allowed here: {', '.join(sorted(known))}"
    elif kind == "enum":
        expected = str(detail.get("ctx", {}).get("expected", ""))
        options = [part.strip(" '") for part in expected.replace(" or ", ",").split(",")]
        message += did_you_mean(str(detail["input"]), [o for o in options if o])
    elif kind == "missing":
        message = "required field is missing"
    return SpecProblem(loc, message)


def _model_at(root: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that the data at `loc` is validated against, if it is a model."""
    current: Any = root
    for part in loc:
        current = _unwrap(current)
        if isinstance(part, str) and _is_model(current):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif isinstance(part, int) and get_origin(current) is list:
            current = get_args(current)[0]
        elif isinstance(part, str) and get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    return current if _is_model(current) else None


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> `X`."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(members) == 1:
            return members[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field_names(model: type[BaseModel] | None) -> list[str]:
    return list(model.model_fields) if model is not None else []
