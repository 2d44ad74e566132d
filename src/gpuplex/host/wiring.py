"""Build the host runtime from settings: pick the GPU driver (NVML, or simulated GPUs where there is
no NVIDIA GPU), the MPS control, cgroups and the process runtime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuplex.core.spec.fleet import NodeSpec
from gpuplex.core.spec.runtime import Runtime
from gpuplex.errors import GpuDriverError
from gpuplex.host.cgroups import Cgroups, instance_parent
from gpuplex.host.children import Children
from gpuplex.host.containers import ContainerRuntime
from gpuplex.host.driver import GpuDriver
from gpuplex.host.launcher import Launcher, ProcessRuntime, UserChooser
from gpuplex.host.mps import MpsControl, NvidiaMps, SimulatedMps
from gpuplex.host.runtime import HostRuntime
from gpuplex.host.sim_driver import SimulatedDriver
from gpuplex.host.state import StateDir
from gpuplex.settings import HostSettings, inherited_environment


@dataclass
class OpenedDriver:
    driver: GpuDriver
    note: str | None  # said to the operator, e.g. why simulated GPUs are in use


def open_driver(
    settings: HostSettings,
    dirs: StateDir,
    node: NodeSpec | None,
    mig_on: set[int] | None = None,
    memory_mib: Mapping[str, int] | None = None,
) -> OpenedDriver:
    """The NVML driver, or simulated GPUs (built from `node`, `mig_on` and each model's
    `memory_mib` the first time: see SimulatedDriver)."""
    if settings.driver in ("auto", "nvml"):
        try:
            from gpuplex.host.nvml_driver import NvmlDriver

            return OpenedDriver(NvmlDriver(), None)
        except GpuDriverError as error:
            if settings.driver == "nvml":
                raise
            note = f"no NVIDIA GPU ({error.message.split(':')[0]}): using simulated GPUs"
            return OpenedDriver(SimulatedDriver(dirs.sim, node, mig_on, memory_mib), note)
    return OpenedDriver(SimulatedDriver(dirs.sim, node, mig_on, memory_mib), None)


def open_runtime(
    settings: HostSettings, dirs: StateDir, driver: GpuDriver, *, record_events: bool = True
) -> HostRuntime:
    children = Children()
    base_env = inherited_environment()
    mps: MpsControl = (
        SimulatedMps(children, base_env) if driver.name == "sim" else NvidiaMps(base_env)
    )
    instance = dirs.instance
    users = UserChooser(instance, dirs.homes)
    cgroups = Cgroups.detect(parent=instance_parent(instance))
    launchers: dict[Runtime, Launcher] = {
        Runtime.PROCESS: ProcessRuntime(children, cgroups, dirs.logs, users),
        Runtime.DOCKER: ContainerRuntime("docker", instance, users),
        Runtime.PODMAN: ContainerRuntime("podman", instance, users),
    }
    return HostRuntime(
        dirs, settings, driver, mps, launchers, base_env, record_events=record_events
    )
