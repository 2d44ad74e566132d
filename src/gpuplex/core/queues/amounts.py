"""An amount of one kind of GPU capacity in words, as the queue rules' reasons say it. Pure."""

from __future__ import annotations

from gpuplex.core.plural import counted
from gpuplex.core.queues.tree import COMPUTE_PERCENT, GPU_MEMORY_GIB, GPUS, MIG_PREFIX


def amount_words(value: float, kind: str) -> str:
    """`1 GPU`, `2 GPUs`, `40 GiB of GPU memory`, `30 % compute`, `1 MIG 3g.40gb slice`,
    `3 MIG 3g.40gb slices`."""
    if kind == GPUS:
        return counted(value, "GPU")
    if kind == GPU_MEMORY_GIB:
        return f"{value:g} GiB of GPU memory"
    if kind == COMPUTE_PERCENT:
        return f"{value:g} % compute"
    if kind.startswith(MIG_PREFIX):
        return counted(value, f"MIG {kind.removeprefix(MIG_PREFIX)} slice")
    return f"{value:g} {kind}"
