"""Every few seconds: what each replica holds on its GPU, as the host runtime sees it (NVML or the
simulated driver), written to the store as GPU samples for metering and the GPU map (through the
server's sample intake, which refuses samples that cannot be true)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime

from gpuplex.clock import Clock
from gpuplex.core.meter import GpuSample, SampleSource
from gpuplex.host.driver import GpuDriver
from gpuplex.host.observe import snapshot
from gpuplex.host.state import StateDir
from gpuplex.retry import run_pass

log = logging.getLogger("gpuplex.up.sampler")


def take_samples(
    dirs: StateDir, driver: GpuDriver, node: str, at: datetime, source: SampleSource
) -> list[GpuSample]:
    """One sample per running replica per GPU it was given: the memory its processes hold on that
    GPU (or on a MIG device of it), as the driver attributes it per device, and the part of the GPU
    they kept busy since the previous sample (None where the driver cannot measure the device)."""
    records = dirs.read_state().records
    gpu = snapshot(driver, records)
    busy = driver.process_utilization()
    index_of = {g.uuid: g.index for g in gpu.gpus}
    index_of |= {i.device_uuid: g.index for g in gpu.gpus for i in g.instances}
    held: dict[tuple[str, int], int] = {}
    utilization: dict[tuple[str, int], float | None] = {}
    for process in gpu.processes:
        label = gpu.owner_of_pid.get(process.pid)
        index = index_of.get(process.device_uuid)
        if label is None or index is None:
            continue
        key = (label, index)
        held[key] = held.get(key, 0) + process.used_memory_mib
        measured = busy.get(process.device_uuid)
        before = utilization.get(key, 0.0)
        if measured is None or before is None:
            utilization[key] = None  # one of its devices here cannot be measured: unknown
        else:
            utilization[key] = min(before + measured.get(process.pid, 0.0), 100.0)
    samples = []
    for record in records:
        desired = record.desired
        if record.pid is None:
            continue
        for index in desired.binding.gpu_indices:
            samples.append(
                GpuSample(
                    at=at,
                    node=node,
                    gpu_index=index,
                    tenant=desired.tenant,
                    workload=desired.workload,
                    replica=desired.replica,
                    memory_used_mib=held.get((record.label, index), 0),
                    utilization_percent=utilization.get((record.label, index)),
                    source=source,
                )
            )
    return samples


class Sampler(threading.Thread):
    def __init__(
        self,
        dirs: StateDir,
        driver: GpuDriver,
        node: str,
        store: Callable[[list[GpuSample]], int],
        clock: Clock,
        interval_s: float,
    ) -> None:
        super().__init__(name="gpuplex-sampler", daemon=True)
        self.dirs, self.driver, self.node = dirs, driver, node
        self.store, self.clock, self.interval_s = store, clock, interval_s
        self.stopping = threading.Event()

    def run(self) -> None:
        source: SampleSource = "sim" if self.driver.name == "sim" else "nvml"
        while not self.stopping.wait(self.interval_s):  # a missed sample: the next one comes
            run_pass(
                functools.partial(self.sample_once, source),
                job="GPU sampling",
                retry_in_s=self.interval_s,
                log=log,
            )

    def sample_once(self, source: SampleSource) -> None:
        self.store(take_samples(self.dirs, self.driver, self.node, self.clock.utc_now(), source))
