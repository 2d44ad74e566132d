"""The kinds of GPU capacity a quota counts, by the names the queues use for them, and an amount
of one kind in words, as every reason and message says it. Pure.

`gpus` (whole GPUs), `gpu_memory_gib` and `compute_percent` (shares of a GPU), `mig:<profile>`
(MIG slices): the fields of a tenant's `quota` and of a queue's guarantee and limit.
"""

from __future__ import annotations

from gpuplex.core.plural import counted

GPUS = "gpus"
GPU_MEMORY_GIB = "gpu_memory_gib"
COMPUTE_PERCENT = "compute_percent"
MIG_PREFIX = "mig:"


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
