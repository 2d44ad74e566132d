"""The GPU driver interface the host runtime talks to; NVML and the simulated driver implement it."""

from __future__ import annotations

from typing import Protocol

from gpuplex.core.apply.model import GpuProcessStatus, GpuStatus, MigInstanceStatus
from gpuplex.core.catalog.device_check import DeviceMigProfile

#: device UUID (a GPU's or a MIG device's) -> pid -> percent of the whole GPU the process kept its
#: SMs busy since the previous reading. A device listed was measured: a process on it that is not
#: listed was idle (0 %). A device not listed cannot be measured (its utilization is unknown).
ProcessUtilization = dict[str, dict[int, float]]


class GpuDriver(Protocol):
    name: str

    def gpus(self) -> list[GpuStatus]: ...

    def processes(self) -> list[GpuProcessStatus]: ...

    def process_utilization(self) -> ProcessUtilization:
        """Each process's SM utilization since the previous call (only the sampler calls it)."""
        ...

    def possible_placements(self, gpu_index: int) -> dict[int, list[tuple[int, int]]]: ...

    def mig_profiles(self, gpu_index: int) -> list[DeviceMigProfile]: ...

    def create_mig_instance(
        self, gpu_index: int, profile_id: int, start_slot: int
    ) -> MigInstanceStatus: ...

    def destroy_mig_instance(self, gpu_index: int, gi_id: int) -> None: ...

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None: ...

    def client_env(self) -> dict[str, str]: ...

    def close(self) -> None: ...
