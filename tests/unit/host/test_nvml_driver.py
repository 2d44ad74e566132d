"""NvmlDriver against a fake `pynvml` that behaves like NVML on one H100-80GB in MIG mode and one
A100-80GB without MIG; plus the real NVML where a GPU is present (marked `gpu`)."""

from __future__ import annotations

import ctypes
import sys
import types
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from gpuplex.core.apply.model import GpuProcessStatus
from gpuplex.core.catalog import gpu_model
from gpuplex.core.catalog.device_check import DeviceMigProfile, catalog_verdict
from gpuplex.errors import ErrorCode, GpuDriverError
from gpuplex.host.driver import GpuDriver
from gpuplex.host.nvml_driver import NvmlCallError, NvmlDriver
from gpuplex.host.nvml_names import mig_profile_name, model_from_nvml_name

MIB = 1024 * 1024
INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND = 2, 3, 4, 6
LIBRARY_NOT_FOUND, GPU_IS_LOST, IN_USE, INSUFFICIENT_RESOURCES = 12, 15, 19, 23
ERROR_TEXT = {
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    NOT_FOUND: "Not Found",
    LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    GPU_IS_LOST: "GPU is lost",
    IN_USE: "In use by another client",
    INSUFFICIENT_RESOURCES: "Insufficient Resources",
}

# NVML GI profile index -> profile id on 8-slice GPUs (facts §1.1). Index 8 (2_SLICE_REV1) is
# answered INVALID_ARGUMENT, the rest NOT_SUPPORTED: the driver must skip both.
GI_INDEX_TO_ID = {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 9: 15}
# NVML CI profile index -> compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*).
CI_INDEX_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return ERROR_TEXT.get(self.value, f"NVML error {self.value}")


class FakePlacement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass
class FakeGi:
    gi_id: int
    profile_id: int
    start: int
    size: int
    compute_slices: int
    mig_uuid: str
    cis: list[int] = field(default_factory=list)  # compute-instance handles
    procs: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    index: int
    uuid: str
    name: str
    memory_mib: int
    mig: bool | None  # None: no MIG at all
    gis: list[FakeGi] = field(default_factory=list)
    procs: list[tuple[int, int | None]] = field(default_factory=list)
    mps_procs: list[tuple[int, int | None]] = field(default_factory=list)
    lost: bool = False
    #: NVML's buffer of process utilization samples: (pid, timestamp in µs, smUtil %)
    busy: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class FakeMigDevice:
    gpu: FakeGpu
    gi: FakeGi


def _arg(ref: Any) -> Any:
    """The object behind ctypes.byref(x)."""
    return ref._obj


class FakeNvml:
    """The pynvml functions NvmlDriver uses, over a list of FakeGpu. Records every change."""

    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVMLError = FakeNVMLError
    c_nvmlGpuInstancePlacement_t = FakePlacement
    c_nvmlGpuInstance_t = ctypes.c_void_p  # real: opaque pointers; ints here
    c_nvmlComputeInstance_t = ctypes.c_void_p

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.calls: list[tuple[Any, ...]] = []
        self.init_error: int | None = None
        self.fail_ci_create = False
        self.mig_mode_status = 0
        self._next_ci = 1

    def module(self) -> types.ModuleType:
        module = types.ModuleType("pynvml")
        for name in dir(self):
            if name.startswith(("nvml", "NVML", "c_nvml")):
                setattr(module, name, getattr(self, name))
        return module

    # handles: a GI handle is gpu_index * 1000 + gi_id + 1, so it fits a c_void_p array
    def _gi(self, handle: int) -> tuple[FakeGpu, FakeGi]:
        gpu = self.gpus[handle // 1000]
        return gpu, next(gi for gi in gpu.gis if gi.gi_id == handle % 1000 - 1)

    @staticmethod
    def _gi_handle(gpu: FakeGpu, gi: FakeGi) -> int:
        return gpu.index * 1000 + gi.gi_id + 1

    def _ci(self, handle: int) -> tuple[FakeGpu, FakeGi]:
        for gpu in self.gpus:
            for gi in gpu.gis:
                if handle in gi.cis:
                    return gpu, gi
        raise FakeNVMLError(NOT_FOUND)

    def _mig_profile(self, gpu: FakeGpu, profile_id: int) -> Any:
        model = gpu_model("H100-80GB" if "H100" in gpu.name else "A100-80GB")
        assert model is not None
        assert model.mig is not None
        return next(p for p in model.mig.profiles if p.profile_id == profile_id)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.calls.append(("init",))

    def nvmlShutdown(self) -> None:
        self.calls.append(("shutdown",))

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu | FakeMigDevice) -> str:
        return handle.gi.mig_uuid if isinstance(handle, FakeMigDevice) else handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return handle.name

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> Any:
        if handle.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        return SimpleNamespace(total=handle.memory_mib * MIB, free=0, used=0)

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        if handle.mig is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return [int(handle.mig), int(handle.mig)]

    def nvmlDeviceSetMigMode(self, handle: FakeGpu, mode: int) -> int:
        self.calls.append(("set_mig_mode", handle.index, mode))
        return self.mig_mode_status

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: FakeGpu, profile: int) -> Any:
        if not handle.mig or profile not in GI_INDEX_TO_ID:
            raise FakeNVMLError(INVALID_ARGUMENT if profile == 8 else NOT_SUPPORTED)
        mig = self._mig_profile(handle, GI_INDEX_TO_ID[profile])
        return SimpleNamespace(
            id=mig.profile_id,
            sliceCount=mig.compute_slices,
            instanceCount=mig.max_count,
            memorySizeMB=mig.memory_mib,
            name=f"MIG {mig.name}".encode(),
        )

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: FakeGpu, profile_id: int, placements: Any, count_ref: Any
    ) -> int:
        mig = self._mig_profile(handle, profile_id)
        if placements is not None:
            assert _arg(count_ref).value >= len(mig.starts)
            for i, start in enumerate(mig.starts):
                placements[i].start, placements[i].size = start, mig.memory_slices
        _arg(count_ref).value = len(mig.starts)
        return 0

    def nvmlDeviceGetGpuInstances(
        self, handle: FakeGpu, profile_id: int, gis: Any, count_ref: Any
    ) -> int:
        found = [gi for gi in handle.gis if gi.profile_id == profile_id]
        assert _arg(count_ref).value >= len(found), "array too small for the profile's instances"
        for i, gi in enumerate(found):
            gis[i] = self._gi_handle(handle, gi)
        _arg(count_ref).value = len(found)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: FakeGpu, gi_id: int) -> int:
        for gi in handle.gis:
            if gi.gi_id == gi_id:
                return self._gi_handle(handle, gi)
        raise FakeNVMLError(NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, handle: int) -> Any:
        _, gi = self._gi(handle)
        placement = SimpleNamespace(start=gi.start, size=gi.size)
        return SimpleNamespace(id=gi.gi_id, profileId=gi.profile_id, placement=placement)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: FakeGpu, profile_id: int, placement_ref: Any
    ) -> int:
        placement = _arg(placement_ref)
        start, size = int(placement.start), int(placement.size)
        self.calls.append(("create_gi", handle.index, profile_id, start, size))
        mig = self._mig_profile(handle, profile_id)
        if start not in mig.starts or size != mig.memory_slices:
            raise FakeNVMLError(INVALID_ARGUMENT)
        if any(start < gi.start + gi.size and gi.start < start + size for gi in handle.gis):
            raise FakeNVMLError(INSUFFICIENT_RESOURCES)
        gi_id = max((gi.gi_id for gi in handle.gis), default=0) + 1
        gi = FakeGi(gi_id, profile_id, start, size, mig.compute_slices, f"MIG-new-{gi_id}")
        handle.gis.append(gi)
        return self._gi_handle(handle, gi)

    def nvmlGpuInstanceDestroy(self, handle: int) -> int:
        gpu, gi = self._gi(handle)
        self.calls.append(("destroy_gi", gpu.index, gi.gi_id))
        if gi.cis:
            raise FakeNVMLError(IN_USE)
        gpu.gis.remove(gi)
        return 0

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, handle: int, profile: int, eng_profile: int
    ) -> Any:
        _, gi = self._gi(handle)
        slices = CI_INDEX_SLICES.get(profile)
        if slices is None or slices > gi.compute_slices or eng_profile != 0:
            raise FakeNVMLError(NOT_SUPPORTED)
        return SimpleNamespace(
            id=profile, sliceCount=slices, instanceCount=gi.compute_slices // slices
        )

    def nvmlGpuInstanceCreateComputeInstance(self, handle: int, ci_profile_id: int) -> int:
        gpu, gi = self._gi(handle)
        self.calls.append(("create_ci", gpu.index, gi.gi_id, ci_profile_id))
        if self.fail_ci_create:
            raise FakeNVMLError(NO_PERMISSION)
        ci = self._next_ci = self._next_ci + 1
        gi.cis.append(ci)
        return ci

    def nvmlGpuInstanceGetComputeInstances(
        self, handle: int, ci_profile_id: int, cis: Any, count_ref: Any
    ) -> int:
        _, gi = self._gi(handle)
        # every CI in these fakes spans its GI: it belongs to the profile with all the slices
        found = gi.cis if CI_INDEX_SLICES[ci_profile_id] == gi.compute_slices else []
        for i, ci in enumerate(found):
            cis[i] = ci
        _arg(count_ref).value = len(found)
        return 0

    def nvmlComputeInstanceDestroy(self, handle: int) -> int:
        gpu, gi = self._ci(handle)
        self.calls.append(("destroy_ci", gpu.index, gi.gi_id))
        gi.cis.remove(handle)
        return 0

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        return 7 if handle.mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeMigDevice:
        with_cis = [gi for gi in handle.gis if gi.cis]
        if index >= len(with_cis):
            raise FakeNVMLError(NOT_FOUND)
        return FakeMigDevice(handle, with_cis[index])

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeMigDevice) -> int:
        return handle.gi.gi_id

    def _procs(self, handle: FakeGpu | FakeMigDevice, mps: bool) -> list[Any]:
        if isinstance(handle, FakeMigDevice):
            listed = [] if mps else handle.gi.procs
        elif handle.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        elif handle.mig:  # the aggregate a privileged caller sees on a MIG parent: not wanted
            listed = [p for gi in handle.gis for p in gi.procs]
        else:
            listed = handle.mps_procs if mps else handle.procs
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in listed]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu | FakeMigDevice) -> list[Any]:
        return self._procs(handle, mps=False)

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: FakeGpu | FakeMigDevice) -> list[Any]:
        if isinstance(handle, FakeGpu) and handle.mig is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return self._procs(handle, mps=True)

    def nvmlDeviceGetProcessUtilization(self, handle: FakeGpu, since_us: int) -> list[Any]:
        """As pynvml's: the samples newer than `since_us`; NOT_FOUND when there are none; not
        supported under MIG."""
        self.calls.append(("utilization", handle.index, since_us))
        if isinstance(handle, FakeMigDevice) or handle.mig:
            raise FakeNVMLError(NOT_SUPPORTED)
        if handle.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        newer = [(pid, at, sm) for pid, at, sm in handle.busy if at > since_us]
        if not newer:
            raise FakeNVMLError(NOT_FOUND)
        return [SimpleNamespace(pid=pid, timeStamp=at, smUtil=sm) for pid, at, sm in newer]


def two_gpu_host() -> FakeNvml:
    h100 = FakeGpu(0, "GPU-h100", "NVIDIA H100 80GB HBM3", 81559, mig=True)
    h100.gis = [
        FakeGi(1, 9, 4, 4, 3, "MIG-3g", cis=[101], procs=[(4242, 2048 * MIB)]),
        FakeGi(7, 19, 0, 1, 1, "MIG-1g", cis=[102]),
    ]
    a100 = FakeGpu(1, "GPU-a100", "NVIDIA A100-SXM4-80GB", 81920, mig=False)
    a100.procs = [(300, 1536 * MIB), (301, None)]
    a100.mps_procs = [(300, 1024 * MIB)]  # also listed as an MPS client: one entry, most memory
    return FakeNvml([h100, a100])


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = two_gpu_host()
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    return fake


@pytest.fixture
def driver(host: FakeNvml) -> NvmlDriver:
    return NvmlDriver()


def test_gpus_reports_models_memory_and_existing_mig_instances(driver: NvmlDriver) -> None:
    h100, a100 = driver.gpus()
    assert (h100.index, h100.uuid, h100.model, h100.memory_mib) == (
        0,
        "GPU-h100",
        "H100-80GB",
        81559,
    )
    assert h100.mig_enabled
    assert not h100.lost
    assert [
        (i.gi_id, i.profile_id, i.profile, i.start_slot, i.size_slots, i.device_uuid)
        for i in h100.instances
    ] == [
        (7, 19, "1g.10gb", 0, 1, "MIG-1g"),
        (1, 9, "3g.40gb", 4, 4, "MIG-3g"),
    ]
    assert (a100.uuid, a100.model, a100.memory_mib) == ("GPU-a100", "A100-80GB", 81920)
    assert not a100.mig_enabled
    assert a100.instances == []


def test_processes_per_gpu_and_per_mig_device_in_mib(driver: NvmlDriver) -> None:
    assert sorted(driver.processes(), key=lambda p: p.pid) == [
        GpuProcessStatus(device_uuid="GPU-a100", pid=300, used_memory_mib=1536),
        GpuProcessStatus(device_uuid="GPU-a100", pid=301, used_memory_mib=0),
        GpuProcessStatus(device_uuid="MIG-3g", pid=4242, used_memory_mib=2048),
    ]


def test_process_utilization_on_whole_gpus_since_the_last_reading(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    a100 = host.gpus[1]
    a100.busy = [(300, 1_000, 40), (300, 2_000, 60), (301, 2_000, 10)]
    # the H100 is in MIG mode: NVML measures no process there, so it is not listed (unknown)
    assert driver.process_utilization() == {"GPU-a100": {300: 50.0, 301: 10.0}}
    # nothing new since: NOT_FOUND, every process on it idle
    assert driver.process_utilization() == {"GPU-a100": {}}
    a100.busy.append((300, 3_000, 90))
    assert driver.process_utilization() == {"GPU-a100": {300: 90.0}}
    asked = [c[2] for c in host.calls if c[0] == "utilization"]
    assert asked == [0, 2_000, 2_000]  # each reading asks for what came after the last one seen
    a100.lost = True
    assert driver.process_utilization() == {}


def test_possible_placements_by_profile_id(driver: NvmlDriver, host: FakeNvml) -> None:
    placements = driver.possible_placements(0)
    assert set(placements) == {19, 20, 15, 14, 9, 5, 0}
    assert placements[9] == [(0, 4), (4, 4)]
    assert placements[15] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert placements[0] == [(0, 8)]
    assert [c for c in host.calls if c[0] != "init"] == []  # read-only


def test_mig_profiles_read_info_and_placements_and_agree_with_the_catalog(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    for status in driver.gpus():
        profiles = driver.mig_profiles(status.index)
        model = gpu_model(status.model)
        verdict = catalog_verdict(
            status.model, model, status.memory_mib, status.mig_enabled, profiles
        )
        assert verdict.disagreements == [], verdict.summary
    by_id = {p.profile_id: p for p in driver.mig_profiles(0)}
    assert by_id[9] == DeviceMigProfile(9, "3g.40gb", 3, 40320, 2, ((0, 4), (4, 4)))
    assert [c for c in host.calls if c[0] != "init"] == []  # read-only


def test_create_mig_instance_places_it_and_adds_a_full_compute_instance(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    created = driver.create_mig_instance(0, profile_id=14, start_slot=2)
    assert host.calls[1:] == [("create_gi", 0, 14, 2, 2), ("create_ci", 0, 8, 1)]  # 2c in a 2g
    assert (created.gi_id, created.profile, created.start_slot, created.size_slots) == (
        8,
        "2g.20gb",
        2,
        2,
    )
    assert created.device_uuid == "MIG-new-8"
    assert created in driver.gpus()[0].instances


def test_create_rejects_a_start_the_profile_does_not_allow(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    with pytest.raises(
        GpuDriverError,
        match=r"GPU 0: MIG profile id 9 cannot start at slot 2 \(valid starts: 0, 4\)",
    ):
        driver.create_mig_instance(0, profile_id=9, start_slot=2)
    with pytest.raises(GpuDriverError, match="GPU 0 has no MIG profile id 42"):
        driver.create_mig_instance(0, profile_id=42, start_slot=0)
    assert host.calls == [("init",)]


def test_create_on_an_occupied_placement_names_gpu_call_and_next_step(driver: NvmlDriver) -> None:
    with pytest.raises(NvmlCallError) as caught:
        driver.create_mig_instance(0, profile_id=9, start_slot=4)
    assert caught.value.code is ErrorCode.HOST_GPU_DRIVER
    assert caught.value.nvml_code == INSUFFICIENT_RESOURCES
    assert caught.value.message == (
        "GPU 0: nvmlDeviceCreateGpuInstanceWithPlacement failed: Insufficient Resources; "
        "the placement overlaps an existing MIG instance; run `nvidia-smi mig -lgi` to see what is there"
    )
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_a_failed_compute_instance_removes_the_new_gpu_instance(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    host.fail_ci_create = True
    with pytest.raises(
        GpuDriverError, match=r"nvmlGpuInstanceCreateComputeInstance failed.*run gpuplex as root"
    ):
        driver.create_mig_instance(0, profile_id=19, start_slot=1)
    assert host.calls[-1] == ("destroy_gi", 0, 8)
    assert [gi.gi_id for gi in host.gpus[0].gis] == [1, 7]


def test_destroy_removes_compute_instances_then_the_gpu_instance(
    driver: NvmlDriver, host: FakeNvml
) -> None:
    driver.destroy_mig_instance(0, gi_id=1)
    assert host.calls[1:] == [("destroy_ci", 0, 1), ("destroy_gi", 0, 1)]
    assert [i.gi_id for i in driver.gpus()[0].instances] == [7]
    with pytest.raises(
        GpuDriverError, match="GPU 0: nvmlDeviceGetGpuInstanceById failed: Not Found"
    ):
        driver.destroy_mig_instance(0, gi_id=1)


def test_set_mig_mode_and_a_pending_change(driver: NvmlDriver, host: FakeNvml) -> None:
    driver.set_mig_mode(1, enabled=True)
    driver.set_mig_mode(0, enabled=False)
    assert host.calls[1:] == [("set_mig_mode", 1, 1), ("set_mig_mode", 0, 0)]
    host.mig_mode_status = IN_USE
    with pytest.raises(
        GpuDriverError, match=r"GPU 1: MIG mode on is pending.*gpuplex never resets a GPU"
    ):
        driver.set_mig_mode(1, enabled=True)


def test_client_env_and_close(driver: NvmlDriver, host: FakeNvml) -> None:
    as_protocol: GpuDriver = driver  # mypy checks NvmlDriver implements the interface
    assert as_protocol.name == "nvml"
    assert driver.client_env() == {}
    driver.close()
    driver.close()
    assert host.calls == [("init",), ("shutdown",)]


def test_a_lost_gpu_is_reported_lost_and_a_gpu_without_mig_is_fine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lost = FakeGpu(0, "GPU-lost", "NVIDIA H100 80GB HBM3", 81559, mig=False, lost=True)
    l4 = FakeGpu(1, "GPU-l4", "NVIDIA L4", 23034, mig=None, procs=[(9, 100 * MIB)])
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([lost, l4]).module())
    driver = NvmlDriver()
    gone, fine = driver.gpus()
    assert (gone.uuid, gone.model, gone.lost, gone.memory_mib, gone.mig_enabled) == (
        "GPU-lost",
        "H100-80GB",
        True,
        0,
        False,
    )
    assert (fine.model, fine.lost, fine.mig_enabled) == ("L4", False, False)
    assert driver.processes() == [
        GpuProcessStatus(device_uuid="GPU-l4", pid=9, used_memory_mib=100)
    ]
    assert driver.possible_placements(1) == {}


def test_missing_pynvml_says_what_to_do_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(GpuDriverError) as caught:
        NvmlDriver()
    message = caught.value.message
    assert message.startswith("NVML is not available: the pynvml module cannot be imported")
    assert message.endswith("Is the NVIDIA driver installed? Use --driver sim to run without a GPU")
    assert "Traceback" not in message
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


def test_nvml_that_cannot_start_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([])
    fake.init_error = LIBRARY_NOT_FOUND
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    with pytest.raises(
        GpuDriverError, match=r"^NVML is not available: NVML Shared Library Not Found\. Is"
    ):
        NvmlDriver()


@pytest.mark.parametrize(
    ("nvml_name", "memory_mib", "model"),
    [
        ("NVIDIA H100 80GB HBM3", 81559, "H100-80GB"),
        ("NVIDIA H100 PCIe", 81559, "H100-80GB"),
        ("NVIDIA H100 NVL", 95830, "H100-94GB"),
        ("NVIDIA H100 SXM5 80GB", 81559, "H100-80GB"),  # not in the catalog: family + memory
        ("NVIDIA H100 64GB HBM2e", 65536, "NVIDIA H100 64GB HBM2e"),  # no H100 that size
        ("NVIDIA A100-SXM4-40GB", 40536, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40536, "A100-40GB"),
        ("NVIDIA A100 80GB PCIe", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", 81920, "A100-80GB"),
        ("NVIDIA A100-SXM-80GB", 81920, "A100-80GB"),
        ("NVIDIA H200", 143771, "H200-141GB"),
        ("NVIDIA L4", 23034, "L4"),
        ("NVIDIA L40S", 46068, "L40S"),
        ("Tesla T4", 15360, "T4"),
        ("NVIDIA A30", 24576, "A30"),
        ("NVIDIA A10", 23028, "A10"),
        ("NVIDIA GeForce RTX 4090", 24564, "RTX-4090"),
        ("NVIDIA GeForce RTX 4080", 16376, "NVIDIA GeForce RTX 4080"),
        ("NVIDIA GH200 480GB", 97871, "NVIDIA GH200 480GB"),
    ],
)
def test_model_from_nvml_name(nvml_name: str, memory_mib: int, model: str) -> None:
    assert model_from_nvml_name(nvml_name, memory_mib) == model


def test_mig_profile_name_from_the_catalog_else_nvml() -> None:
    assert mig_profile_name("H100-80GB", 15, "MIG 1g.20gb") == "1g.20gb"
    assert mig_profile_name("A100-40GB", 15, "MIG 1g.10gb") == "1g.10gb"
    assert mig_profile_name("H100-80GB", 99, "MIG 1g.20gb+gfx") == "1g.20gb+gfx"
    assert mig_profile_name("NVIDIA GH200 480GB", 9, "MIG 3g.48gb") == "3g.48gb"


def _real_nvml_or_skip() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError or any NVMLError: no usable GPU here
        pytest.skip(f"no NVIDIA GPU: NVML does not start ({exc})")
    pynvml.nvmlShutdown()


@pytest.mark.gpu
def test_real_nvml_reports_every_gpu_with_a_uuid_and_memory() -> None:
    _real_nvml_or_skip()
    driver = NvmlDriver()
    try:
        gpus = driver.gpus()
        assert gpus, "NVML started but reports no GPU"
        for gpu in gpus:
            assert gpu.uuid.startswith("GPU-")
            assert gpu.memory_mib > 0
            assert not gpu.lost
        driver.processes()  # lists without raising
        # per-process utilization: every whole GPU is measured (an idle one answers NOT_FOUND,
        # read as nobody busy), values are percent, and a second reading starts where the first
        # ended
        for _ in range(2):
            reading = driver.process_utilization()
            assert set(reading) <= {g.uuid for g in gpus}
            assert {g.uuid for g in gpus if not g.mig_enabled} <= set(reading)
            assert all(0 <= p <= 100 for busy in reading.values() for p in busy.values())
    finally:
        driver.close()


@pytest.mark.gpu
def test_the_catalog_agrees_with_every_real_gpu() -> None:
    """Read-only: MIG mode is not touched. Where NVML lists no profile while MIG mode is off,
    the memory is still compared and the profiles are skipped with that reason."""
    _real_nvml_or_skip()
    driver = NvmlDriver()
    try:
        verdicts = [
            catalog_verdict(
                s.model,
                gpu_model(s.model),
                s.memory_mib,
                s.mig_enabled,
                driver.mig_profiles(s.index),
            )
            for s in driver.gpus()
        ]
    finally:
        driver.close()
    for verdict in verdicts:
        assert verdict.disagreements == [], verdict.summary
    if not all(v.profiles_compared for v in verdicts):
        pytest.skip("memory agrees; MIG profiles not listed by NVML while MIG mode is off")
