"""A count with its noun, singular for one and plural otherwise: `1 GPU`, `2 GPUs`, `1.5 GPUs`,
`1 entry`, `3 entries`. Pure; every message that prints a count with a unit says it this way."""

from __future__ import annotations


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, with `plural` (default: `noun` + "s") unless `count` is exactly one."""
    number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {noun if count == 1 else (plural or noun + 's')}"
