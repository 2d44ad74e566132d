"""The simulated model server's error replies, in vLLM 0.32's shape:

    {"error": {"message": str, "type": str, "param": str | null, "code": <the HTTP status>}}

vLLM names the type after where the check failed: `Bad Request` (with a `body.<field>` param) when
the body does not fit the request schema, `BadRequestError` when a value is refused by the server's
own checks (`param` then names the field), `NotFoundError` for an unknown model. A path that does
not exist answers as FastAPI does: `{"detail": "Not Found"}`. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

import orjson

SCHEMA_ERROR = "Bad Request"  # vLLM's RequestValidationError handler
_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


@dataclass(frozen=True, slots=True)
class ModelErrorReply:
    """An error: its HTTP status and vLLM's `{"error": {...}}` body."""

    status: int
    message: str
    param: str | None = None
    kind: str | None = None  # the body's `type`; by default vLLM's name for the status
    no_route: bool = False  # the path does not exist for this model: FastAPI's `detail` body

    @property
    def type(self) -> str:
        return self.kind or _TYPES.get(self.status) or HTTPStatus(self.status).phrase

    def body(self) -> bytes:
        if self.no_route:
            return detail(self.status)
        error = {"message": self.message, "type": self.type, "param": self.param}
        return orjson.dumps({"error": {**error, "code": self.status}})


def refused(message: str, param: str | None = None) -> ModelErrorReply:
    """A value the server's own checks refuse (vLLM's VLLMValidationError)."""
    return ModelErrorReply(400, message, param)


def invalid(field: str | None, message: str) -> ModelErrorReply:
    """A body that does not fit the request schema (vLLM's pydantic validation)."""
    param = "body" if field is None else f"body.{field}"
    return ModelErrorReply(400, f"1 validation error:\n  {param}: {message}", param, SCHEMA_ERROR)


def invalid_json() -> ModelErrorReply:
    return invalid(None, "JSON decode error: send a JSON object")


def unknown_model(model: str, bases: tuple[str, ...]) -> ModelErrorReply:
    """vLLM names only the base models, not the adapters, in its answer."""
    message = f"The model `{model}` does not exist. Valid aliases: {', '.join(bases)}."
    return ModelErrorReply(404, message, "model")


def no_route() -> ModelErrorReply:
    """What vLLM answers on a path its model's task does not serve (embeddings on a generative
    model, completions on an embedding model): the route is not there at all."""
    return ModelErrorReply(404, "Not Found", no_route=True)


def detail(status: int) -> bytes:
    """FastAPI's answer for a path or method the server does not have."""
    return orjson.dumps({"detail": HTTPStatus(status).phrase})
