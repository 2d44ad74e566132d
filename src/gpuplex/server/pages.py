"""Pagination: `?limit=N&cursor=C` in, `{"items": [...], "next_cursor": C | null}` out.

A cursor is opaque to clients: the offset or the id to continue from, as URL-safe text. A cursor
that does not decode is a 422 naming the `cursor` field, never a 500."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Annotated, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel

from gpuplex.errors import ErrorCode
from gpuplex.server.problems import ApiProblem

T = TypeVar("T")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
#: What a cursor encodes: `p` and a position that fits a 64-bit database integer.
_POSITION = re.compile(r"p(0|[1-9][0-9]{0,17})")

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")]
Cursor = Annotated[
    str | None, Query(max_length=64, description="next_cursor from the previous page.")
]


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"p{position}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int:
    """The position a cursor stands for; 0 for the first page."""
    if cursor is None:
        return 0
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode()).decode()
    except ValueError:  # binascii.Error and UnicodeError are ValueErrors
        text = ""
    found = _POSITION.fullmatch(text)
    if found is None or encode_cursor(int(found[1])) != cursor:
        raise ApiProblem(
            ErrorCode.INVALID_REQUEST, "cursor: not a cursor this API gave out", field="cursor"
        )
    return int(found[1])


def page_of(items: Sequence[T], limit: int, cursor: str | None) -> Page[T]:
    """One page of a list the server holds whole (tenants, workloads, nodes)."""
    start = decode_cursor(cursor)
    chunk = list(items[start : start + limit])
    more = start + limit < len(items)
    return Page[T](items=chunk, next_cursor=encode_cursor(start + limit) if more else None)
