"""Sorted lists the planner's index keeps: bisection to find, insertion to add, deletion to
remove. A missing entry is a bug in the index's bookkeeping, said loudly (KeyError)."""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import Any, TypeVar

Order = tuple[int, int]
_Entry = TypeVar("_Entry", bound=tuple[Any, ...])


class EmptyGpus:
    """Empty GPUs, as `(order, gpu_id)`, sorted by order. The first is the one taken most often
    (binpack fills in order), so they are kept negated, last first: taking the first is then a pop
    from a list's end, not a move of every other entry (20 us at 56,000 GPUs, for each GPU a plan
    opens)."""

    __slots__ = ("_negated",)

    def __init__(self) -> None:
        self._negated: list[tuple[int, int, int]] = []  # ascending: the first GPU is the last

    def add(self, entry: tuple[Order, int]) -> None:
        insort(self._negated, _negate(entry))

    def add_all(self, entries: list[tuple[Order, int]]) -> None:
        """`add` of each, sorted once: GPUs added one by one in order each go to the front."""
        self._negated += map(_negate, entries)
        self._negated.sort()

    def remove(self, entry: tuple[Order, int]) -> None:
        remove_sorted(self._negated, _negate(entry))

    def first(self) -> tuple[Order, int] | None:
        return _negate_back(self._negated[-1]) if self._negated else None

    def __len__(self) -> int:
        return len(self._negated)

    def __iter__(self) -> Iterator[tuple[Order, int]]:
        return (_negate_back(negated) for negated in reversed(self._negated))


def _negate(entry: tuple[Order, int]) -> tuple[int, int, int]:
    (first, second), gpu_id = entry
    return (-first, -second, -gpu_id)


def _negate_back(negated: tuple[int, int, int]) -> tuple[Order, int]:
    first, second, gpu_id = negated
    return ((-first, -second), -gpu_id)


def add_sorted(items: list[_Entry], more: list[_Entry]) -> None:
    items += more
    items.sort()


def remove_sorted(items: list[_Entry], item: _Entry) -> None:
    at = bisect_left(items, item)
    if at == len(items) or items[at] != item:
        raise KeyError(item)  # a bug in the index bookkeeping, never a user error
    del items[at]
