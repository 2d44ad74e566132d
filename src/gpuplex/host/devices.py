"""What a replica is given of its GPU on this host: the device UUIDs it sees (its GPUs, or its MIG
instance), and for an MPS client the pipe directory of its GPU's MPS control daemon."""

from __future__ import annotations

from collections.abc import Sequence

from gpuplex.core.apply.diff import mig_key
from gpuplex.core.apply.model import MpsDaemonRecord, WorkloadDesired
from gpuplex.core.plan.model import Mode
from gpuplex.errors import HostActionError
from gpuplex.host.driver import GpuDriver


def device_uuids(driver: GpuDriver, wanted: WorkloadDesired) -> list[str]:
    """The UUIDs of the replica's GPUs, or of its MIG instance."""
    gpus = {g.index: g for g in driver.gpus()}
    binding = wanted.binding
    if binding.mig is not None:
        gpu = gpus[binding.gpu_indices[0]]
        key = mig_key(binding.mig.profile, binding.mig.start_slot)
        for instance in gpu.instances:
            if mig_key(instance.profile, instance.start_slot) == key:
                return [instance.device_uuid]
        raise HostActionError(f"GPU {gpu.index} has no MIG instance {key} for {wanted.label}")
    return [gpus[i].uuid for i in binding.gpu_indices]


def mps_pipe(daemons: Sequence[MpsDaemonRecord], wanted: WorkloadDesired) -> str | None:
    """The MPS pipe directory of an MPS client's GPU; None for a replica that is not one."""
    if wanted.binding.mode is not Mode.MPS:
        return None
    for daemon in daemons:
        if daemon.gpu_index == wanted.binding.gpu_indices[0]:
            return daemon.pipe_dir
    raise HostActionError(
        f"no MPS daemon on GPU {wanted.binding.gpu_indices[0]} for {wanted.label}"
    )
