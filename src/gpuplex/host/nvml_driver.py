"""The GPU driver for real NVIDIA GPUs, through NVML (`pynvml` from the nvidia-ml-py wheel).

The only module that imports pynvml, and only when a driver is built. Every NVML failure becomes a
GpuDriverError naming the GPU and the call. It never resets a GPU: a lost GPU is reported as lost.
MIG names: a GPU instance (GI) profile *id* is what `nvidia-smi mig -lgip` prints (19, 15, 9...);
a profile *index* is the NVML_GPU_INSTANCE_PROFILE_* constant used to look a profile up.
"""

from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass
from typing import Any

from gpuplex.core.apply.model import GpuProcessStatus, GpuStatus, MigInstanceStatus
from gpuplex.core.catalog.device_check import DeviceMigProfile
from gpuplex.errors import GpuDriverError
from gpuplex.host.driver import ProcessUtilization
from gpuplex.host.nvml_names import mig_profile_name, model_from_nvml_name

MIB = 1024 * 1024

# NVML return codes (nvml.h); part of the C ABI, so stable across driver versions.
_SUCCESS = 0
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_GPU_IS_LOST = 15
_IN_USE = 19
_INSUFFICIENT_RESOURCES = 23

_NEXT_STEP = {
    _NO_PERMISSION: "run gpuplex as root: MIG changes need it",
    _GPU_IS_LOST: "the GPU fell off the bus; check `nvidia-smi` and the kernel log (dmesg). "
    "gpuplex never resets a GPU: an operator must reset it or reboot the host",
    _IN_USE: "processes still use it; stop them first (`nvidia-smi` lists them)",
    _INSUFFICIENT_RESOURCES: "the placement overlaps an existing MIG instance; "
    "run `nvidia-smi mig -lgi` to see what is there",
    _NOT_FOUND: "it no longer exists; run `gpuplex status` to see what the GPU has now",
}


class NvmlCallError(GpuDriverError):
    """One NVML call failed. `nvml_code` is the NVML return code (NVML_ERROR_*)."""

    def __init__(self, gpu_index: int | None, call: str, nvml_code: int, reason: str) -> None:
        self.gpu_index = gpu_index
        self.call = call
        self.nvml_code = nvml_code
        where = "NVML" if gpu_index is None else f"GPU {gpu_index}"
        next_step = _NEXT_STEP.get(nvml_code, "check the GPU with `nvidia-smi`")
        super().__init__(f"{where}: {call} failed: {reason}; {next_step}")

    @property
    def lost(self) -> bool:
        return self.nvml_code == _GPU_IS_LOST

    @property
    def unsupported(self) -> bool:
        return self.nvml_code in (_NOT_SUPPORTED, _INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class _MigDevice:
    gi_id: int
    uuid: str
    handle: Any


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _unavailable(reason: str) -> GpuDriverError:
    return GpuDriverError(
        f"NVML is not available: {reason}. Is the NVIDIA driver installed? "
        "Use --driver sim to run without a GPU"
    )


class NvmlDriver:
    """GPUs, MIG instances and GPU processes of this host as NVML reports them."""

    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise _unavailable(f"the pynvml module cannot be imported ({exc})") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise _unavailable(str(exc)) from None
        self._nvml: Any = pynvml
        self._open = True
        #: GPU UUID -> the newest utilization sample's timestamp read from it (NVML's µs)
        self._utilization_seen_us: dict[str, int] = {}

    def close(self) -> None:
        if self._open:
            self._open = False
            self._call(None, "nvmlShutdown")

    # --- what the host has ---------------------------------------------------------------------

    def gpus(self) -> list[GpuStatus]:
        return [self._gpu(index) for index in range(self._gpu_count())]

    def processes(self) -> list[GpuProcessStatus]:
        """Compute and MPS-client processes: on the GPU for a whole GPU, per MIG device under MIG."""
        used_mib: dict[tuple[str, int], int] = {}
        for index in range(self._gpu_count()):
            try:
                handle = self._handle(index)
                if self._mig_enabled(index, handle):
                    targets = [(d.uuid, d.handle) for d in self._mig_devices(index, handle)]
                else:
                    targets = [(_text(self._call(index, "nvmlDeviceGetUUID", handle)), handle)]
                for uuid, target in targets:
                    for call in (
                        "nvmlDeviceGetComputeRunningProcesses",
                        "nvmlDeviceGetMPSComputeRunningProcesses",
                    ):
                        for proc in self._optional(index, call, target):
                            key = (uuid, int(proc.pid))
                            mib = int(proc.usedGpuMemory or 0) // MIB
                            used_mib[key] = max(mib, used_mib.get(key, 0))
            except NvmlCallError as exc:
                if not exc.lost:
                    raise
        return [
            GpuProcessStatus(device_uuid=uuid, pid=pid, used_memory_mib=mib)
            for (uuid, pid), mib in used_mib.items()
        ]

    def process_utilization(self) -> ProcessUtilization:
        """SM utilization per process on each whole GPU, from nvmlDeviceGetProcessUtilization:
        the mean `smUtil` (% of the GPU) of the samples NVML took since the previous call (it
        keeps a short buffer; the first call reads all of it). NVML lists only processes that were
        busy, and answers NOT_FOUND when none was: both read as 0 %. A GPU in MIG mode is left
        out (unknown): NVML does not report per-process utilization on MIG devices, and GPM
        (Hopper and newer) measures a GPU instance, not a process, so it is not used."""
        reading: ProcessUtilization = {}
        for index in range(self._gpu_count()):
            try:
                handle = self._handle(index)
                if self._mig_enabled(index, handle):
                    continue
                uuid = _text(self._call(index, "nvmlDeviceGetUUID", handle))
                busy = self._utilization_samples(index, uuid, handle)
            except NvmlCallError as exc:
                if exc.lost or exc.unsupported:
                    continue
                raise
            if busy is not None:
                reading[uuid] = {pid: sum(p) / len(p) for pid, p in busy.items()}
        return reading

    def _utilization_samples(
        self, index: int, uuid: str, handle: Any
    ) -> dict[int, list[float]] | None:
        """pid -> its smUtil samples since the last read; None where the GPU cannot tell."""
        since_us = self._utilization_seen_us.get(uuid, 0)
        try:
            samples = self._call(index, "nvmlDeviceGetProcessUtilization", handle, since_us)
        except NvmlCallError as exc:
            if exc.nvml_code in (_NOT_FOUND, _SUCCESS):
                # no process was busy since `since_us` (pynvml raises SUCCESS for an empty
                # buffer, as its size query did not ask for more room)
                return {}
            if exc.unsupported:
                return None
            raise
        busy: dict[int, list[float]] = {}
        for sample in samples:
            if int(sample.timeStamp) > since_us:
                busy.setdefault(int(sample.pid), []).append(float(min(int(sample.smUtil), 100)))
        self._utilization_seen_us[uuid] = max([since_us, *(int(s.timeStamp) for s in samples)])
        return busy

    def possible_placements(self, gpu_index: int) -> dict[int, list[tuple[int, int]]]:
        """Profile id -> every (start, size) NVML allows, occupied or not. Read-only."""
        handle = self._handle(gpu_index)
        return {
            int(info.id): self._placements(gpu_index, handle, int(info.id))
            for info in self._gi_profiles(gpu_index, handle)
        }

    def mig_profiles(self, gpu_index: int) -> list[DeviceMigProfile]:
        """Every GPU-instance profile NVML lists for the GPU, with its placements. Read-only."""
        handle = self._handle(gpu_index)
        return [
            DeviceMigProfile(
                profile_id=int(info.id),
                name=_text(getattr(info, "name", b"")).removeprefix("MIG ").strip(),
                compute_slices=int(info.sliceCount),
                memory_mib=int(info.memorySizeMB),
                max_count=int(info.instanceCount),
                placements=tuple(self._placements(gpu_index, handle, int(info.id))),
            )
            for info in self._gi_profiles(gpu_index, handle)
        ]

    def client_env(self) -> dict[str, str]:
        return {}

    # --- changes (root) ------------------------------------------------------------------------

    def create_mig_instance(
        self, gpu_index: int, profile_id: int, start_slot: int
    ) -> MigInstanceStatus:
        """A GPU instance of `profile_id` at `start_slot`, with one compute instance spanning it."""
        handle = self._handle(gpu_index)
        infos = [i for i in self._gi_profiles(gpu_index, handle) if int(i.id) == profile_id]
        if not infos:
            raise GpuDriverError(
                f"GPU {gpu_index} has no MIG profile id {profile_id}; "
                "run `nvidia-smi mig -lgip` for the ones it has, and check the plan's GPU model"
            )
        placements = self._placements(gpu_index, handle, profile_id)
        sizes = [size for start, size in placements if start == start_slot]
        if not sizes:
            starts = ", ".join(str(start) for start, _ in placements) or "none"
            raise GpuDriverError(
                f"GPU {gpu_index}: MIG profile id {profile_id} cannot start at slot {start_slot} "
                f"(valid starts: {starts}); re-plan for this GPU"
            )
        placement = self._nvml.c_nvmlGpuInstancePlacement_t(start_slot, sizes[0])
        create = "nvmlDeviceCreateGpuInstanceWithPlacement"
        gi = self._call(gpu_index, create, handle, profile_id, ctypes.byref(placement))
        try:
            self._create_full_compute_instance(gpu_index, gi, int(infos[0].sliceCount))
        except GpuDriverError:
            with contextlib.suppress(GpuDriverError):  # leave nothing half made
                self._call(gpu_index, "nvmlGpuInstanceDestroy", gi)
            raise
        gi_info = self._call(gpu_index, "nvmlGpuInstanceGetInfo", gi)
        return self._instance_status(
            gi_info,
            self._model(gpu_index, handle),
            _text(infos[0].name),
            self._mig_devices(gpu_index, handle),
        )

    def destroy_mig_instance(self, gpu_index: int, gi_id: int) -> None:
        """Its compute instances first, then the GPU instance."""
        handle = self._handle(gpu_index)
        gi = self._call(gpu_index, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        for ci in self._compute_instances(gpu_index, gi):
            self._call(gpu_index, "nvmlComputeInstanceDestroy", ci)
        self._call(gpu_index, "nvmlGpuInstanceDestroy", gi)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None:
        """Only ever run by an explicit operator command. Raises if the change is left pending."""
        nvml = self._nvml
        mode = nvml.NVML_DEVICE_MIG_ENABLE if enabled else nvml.NVML_DEVICE_MIG_DISABLE
        status = self._call(gpu_index, "nvmlDeviceSetMigMode", self._handle(gpu_index), mode)
        if status:
            raise GpuDriverError(
                f"GPU {gpu_index}: MIG mode {'on' if enabled else 'off'} is pending (NVML status "
                f"{status}); it takes effect once the GPU is idle and reset. gpuplex never resets "
                "a GPU: stop its processes, then reset it (`nvidia-smi -r`) or reboot the host"
            )

    # --- NVML plumbing -------------------------------------------------------------------------

    def _call(self, gpu_index: int | None, call: str, *args: Any) -> Any:
        try:
            return getattr(self._nvml, call)(*args)
        except self._nvml.NVMLError as exc:
            raise NvmlCallError(gpu_index, call, int(exc.value), str(exc)) from None

    def _optional(self, gpu_index: int, call: str, *args: Any) -> list[Any]:
        """A listing call; [] where the GPU does not support it."""
        try:
            return list(self._call(gpu_index, call, *args))
        except NvmlCallError as exc:
            if exc.unsupported:
                return []
            raise

    def _gpu_count(self) -> int:
        return int(self._call(None, "nvmlDeviceGetCount"))

    def _handle(self, gpu_index: int) -> Any:
        return self._call(gpu_index, "nvmlDeviceGetHandleByIndex", gpu_index)

    def _gpu(self, index: int) -> GpuStatus:
        uuid, name, memory_mib, lost = "", "", 0, False
        mig_enabled, instances = False, []
        try:
            handle = self._handle(index)
            uuid = _text(self._call(index, "nvmlDeviceGetUUID", handle))
            name = _text(self._call(index, "nvmlDeviceGetName", handle))
            memory_mib = self._memory_mib(index, handle)
            mig_enabled = self._mig_enabled(index, handle)
            if mig_enabled:
                instances = self._instances(index, handle, model_from_nvml_name(name, memory_mib))
        except NvmlCallError as exc:
            if not exc.lost:
                raise
            lost, mig_enabled, instances = True, False, []
        return GpuStatus(
            index=index,
            uuid=uuid,
            model=model_from_nvml_name(name, memory_mib) if name else "unknown",
            memory_mib=memory_mib,
            mig_enabled=mig_enabled,
            lost=lost,
            instances=instances,
        )

    def _memory_mib(self, index: int, handle: Any) -> int:
        return int(self._call(index, "nvmlDeviceGetMemoryInfo", handle).total) // MIB

    def _model(self, index: int, handle: Any) -> str:
        name = _text(self._call(index, "nvmlDeviceGetName", handle))
        return model_from_nvml_name(name, self._memory_mib(index, handle))

    def _mig_enabled(self, index: int, handle: Any) -> bool:
        try:
            current, _pending = self._call(index, "nvmlDeviceGetMigMode", handle)
        except NvmlCallError as exc:
            if exc.unsupported:
                return False
            raise
        return bool(current == self._nvml.NVML_DEVICE_MIG_ENABLE)

    def _profiles(self, index: int, call: str, count: int, owner: Any, *extra: Any) -> list[Any]:
        """Profile info for profile indexes 0..count-1, leaving out those the GPU does not have."""
        infos: list[Any] = []
        for profile in range(count):
            try:
                infos.append(self._call(index, call, owner, profile, *extra))
            except NvmlCallError as exc:
                if not exc.unsupported:
                    raise
        return infos

    def _gi_profiles(self, index: int, handle: Any) -> list[Any]:
        count = self._nvml.NVML_GPU_INSTANCE_PROFILE_COUNT
        return self._profiles(index, "nvmlDeviceGetGpuInstanceProfileInfo", count, handle)

    def _compute_profiles(self, index: int, gi: Any) -> list[Any]:
        nvml, call = self._nvml, "nvmlGpuInstanceGetComputeInstanceProfileInfo"
        shared = nvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        return self._profiles(index, call, nvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, gi, shared)

    def _listed(self, index: int, call: str, owner: Any, info: Any, item_type: Any) -> list[Any]:
        """The existing GPU (or compute) instances of one profile: NVML fills an array sized by the
        profile's instance count."""
        size = int(info.instanceCount)
        if size == 0:
            return []
        array = (item_type * size)()
        count = ctypes.c_uint(size)
        self._call(index, call, owner, info.id, array, ctypes.byref(count))
        return [array[i] for i in range(count.value)]

    def _placements(self, index: int, handle: Any, profile_id: int) -> list[tuple[int, int]]:
        call = "nvmlDeviceGetGpuInstancePossiblePlacements"
        count = ctypes.c_uint(0)
        self._call(index, call, handle, profile_id, None, ctypes.byref(count))  # how many
        if count.value == 0:
            return []
        array = (self._nvml.c_nvmlGpuInstancePlacement_t * count.value)()
        self._call(index, call, handle, profile_id, array, ctypes.byref(count))
        return [(int(array[i].start), int(array[i].size)) for i in range(count.value)]

    def _instances(self, index: int, handle: Any, model: str) -> list[MigInstanceStatus]:
        mig_devices = self._mig_devices(index, handle)
        seen: dict[int, MigInstanceStatus] = {}
        gi_type = self._nvml.c_nvmlGpuInstance_t
        for info in self._gi_profiles(index, handle):
            for gi in self._listed(index, "nvmlDeviceGetGpuInstances", handle, info, gi_type):
                gi_info = self._call(index, "nvmlGpuInstanceGetInfo", gi)
                status = self._instance_status(gi_info, model, _text(info.name), mig_devices)
                seen[status.gi_id] = status
        return sorted(seen.values(), key=lambda instance: instance.start_slot)

    def _instance_status(
        self, gi_info: Any, model: str, nvml_name: str, mig_devices: list[_MigDevice]
    ) -> MigInstanceStatus:
        gi_id, profile_id = int(gi_info.id), int(gi_info.profileId)
        uuids = [device.uuid for device in mig_devices if device.gi_id == gi_id]
        return MigInstanceStatus(
            gi_id=gi_id,
            profile_id=profile_id,
            profile=mig_profile_name(model, profile_id, nvml_name),
            start_slot=int(gi_info.placement.start),
            size_slots=int(gi_info.placement.size),
            device_uuid=uuids[0] if uuids else "",
        )

    def _mig_devices(self, index: int, handle: Any) -> list[_MigDevice]:
        devices: list[_MigDevice] = []
        for slot in range(int(self._call(index, "nvmlDeviceGetMaxMigDeviceCount", handle))):
            try:
                mig = self._call(index, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            except NvmlCallError as exc:
                if exc.nvml_code == _NOT_FOUND:
                    continue
                raise
            gi_id = int(self._call(index, "nvmlDeviceGetGpuInstanceId", mig))
            devices.append(
                _MigDevice(gi_id, _text(self._call(index, "nvmlDeviceGetUUID", mig)), mig)
            )
        return devices

    def _create_full_compute_instance(self, index: int, gi: Any, slices: int) -> None:
        for info in self._compute_profiles(index, gi):
            if int(info.sliceCount) == slices:
                self._call(index, "nvmlGpuInstanceCreateComputeInstance", gi, info.id)
                return
        raise GpuDriverError(
            f"GPU {index}: no compute-instance profile spans all {slices} slices of the new GPU "
            "instance; run `nvidia-smi mig -lcip` and report this GPU model"
        )

    def _compute_instances(self, index: int, gi: Any) -> list[Any]:
        call, ci_type = "nvmlGpuInstanceGetComputeInstances", self._nvml.c_nvmlComputeInstance_t
        return [
            ci
            for info in self._compute_profiles(index, gi)
            for ci in self._listed(index, call, gi, info, ci_type)
        ]
