"""The values fragmentation is measured on: milli-GPUs, a pod's request, and the numpy arrays of
node states. Pure.

GPU amounts are in milli-GPUs: 1000 is one whole GPU. A pod asks for `num_gpu` GPUs of `gpu_milli`
each: a fractional (shared) pod asks for one GPU with `gpu_milli` < 1000, a whole-GPU pod for one or
more GPUs of 1000. `gpu_models` empty means any GPU model will do. The pods of a cluster trace are
`TracePod`s (`gpuplex.core.trace`), and so is a share the live planner scores, as a pod of one GPU
(`gpuplex.core.plan.share_fragmentation`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: one whole GPU, in milli-GPUs
MILLI = 1000

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TracePod:
    """A pod of a cluster trace: what it asks for, and the GPU models it accepts (empty: any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_models: tuple[str, ...] = ()

    @property
    def total_gpu_milli(self) -> int:
        """The pod's whole GPU request: 2 GPUs of 1000 is 2000, one share of 300 is 300."""
        return self.num_gpu * self.gpu_milli

    @property
    def wants_gpu(self) -> bool:
        return self.total_gpu_milli > 0

    @property
    def is_shared(self) -> bool:
        """A fractional pod: part of one GPU, the rest of which others may use."""
        return self.num_gpu == 1 and 0 < self.gpu_milli < MILLI
