"""A simulated GPU driver built from the spec's fleet. It behaves like the NVML driver: MIG instances
are created and destroyed under the catalog's placement rules, and processes report GPU memory. Its
state lives in files under the state directory, so it survives a restart of gpuplex, and faults can
be injected from outside: a process over its memory, a lost GPU (an MPS daemon crash is a real kill
of the stand-in daemon, see host/mps.py).

A simulated tenant process reports its GPU memory by writing one `<device uuid> <MiB> [<busy s>]`
line per device it uses to `<sim dir>/memory/<pid>` (gpuplex.sim.workload does; `GPUPLEX_SIM_DIR`
tells it where). `<busy s>`, the seconds the process has kept that device busy since it started, is
how utilization is simulated: between two readings a process was busy (its busy seconds grew) / (the
time that passed), as NVML averages its utilization samples since the last one read. On a MIG
device it is scaled by the instance's share of the GPU's compute slices (3/7 for a 3g), since
utilization is given as the part of the whole GPU."""

from __future__ import annotations

import fcntl
import json
import os
import uuid as uuid_lib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.apply.model import GpuProcessStatus, GpuStatus, MigInstanceStatus
from gpuplex.core.catalog import gpu_model
from gpuplex.core.catalog.device_check import DeviceMigProfile, profiles_of
from gpuplex.core.catalog.model import MigGeometry, MigProfile
from gpuplex.core.plan import Plan
from gpuplex.core.plan.mig_fit import layout_problems
from gpuplex.core.spec.fleet import MigModeSpec, NodeSpec
from gpuplex.errors import GpuDriverError
from gpuplex.host.driver import ProcessUtilization
from gpuplex.host.proc import start_ticks

SIM_DIR_ENV = "GPUPLEX_SIM_DIR"
_NAMESPACE = uuid_lib.UUID("6f1c3e8a-2d4b-4f7e-9a51-0c2b7d9e4f10")


class _SimInstance(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gi_id: int
    profile_id: int
    start_slot: int


class _SimGpu(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    uuid: str
    model: str
    memory_mib: int = 0  # 0 in machines built before it was kept: the built-in catalog's
    mig_enabled: bool
    lost: bool = False
    instances: list[_SimInstance] = []
    next_gi_id: int = 1


class _SimState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str
    gpus: list[_SimGpu]


def sim_gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid_lib.uuid5(_NAMESPACE, f'{node}/{index}')}"


def sim_mig_uuid(gpu_uuid: str, gi_id: int) -> str:
    return f"MIG-{uuid_lib.uuid5(_NAMESPACE, f'{gpu_uuid}/gi{gi_id}')}"


class SimulatedDriver:
    name = "sim"

    def __init__(
        self,
        sim_dir: Path,
        node: NodeSpec | None,
        mig_on: set[int] | None = None,
        memory_mib: Mapping[str, int] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """Open the simulated machine in `sim_dir`, creating it from `node` the first time. GPUs
        start in MIG mode where the spec says `mig: on`, or where `mig_on` (the first plan's MIG
        GPUs, for `mig: auto`) lists them: the machine as its operator set it up. `memory_mib`
        gives each model's memory (`models_memory` of the plan): the spec's `fleet.gpu_models`
        adds models the built-in catalog does not know. `clock` (monotonic seconds) times the
        utilization readings."""
        self.sim_dir = sim_dir
        self._clock = clock
        self.memory_dir = sim_dir / "memory"
        #: (device, pid) -> (when, busy seconds) at the previous utilization reading
        self._busy_seen: dict[tuple[str, int], tuple[float, float]] = {}
        self._file = sim_dir / "gpus.json"
        if node is None and not self._file.exists():  # a reader (host status): create nothing
            raise GpuDriverError(
                f"no simulated GPUs in {sim_dir}: run `gpuplex host apply FILE --driver sim` first"
            )
        self.memory_dir.mkdir(parents=True, exist_ok=True)
        # tenants, as their own users, report their simulated GPU memory here: like /tmp, anyone
        # may add a file, only its owner may replace or remove it
        self.memory_dir.chmod(0o1733)
        if node is not None and not self._file.exists():
            self._save(_initial_state(node, mig_on or set(), memory_mib or {}))

    # --- the driver interface ---------------------------------------------------------------
    def gpus(self) -> list[GpuStatus]:
        with self._locked() as state:
            return [self._status(gpu) for gpu in state.gpus]

    def processes(self) -> list[GpuProcessStatus]:
        with self._locked() as state:
            lost = {g.uuid for g in state.gpus if g.lost} | {
                sim_mig_uuid(g.uuid, i.gi_id) for g in state.gpus if g.lost for i in g.instances
            }
        return [p for p in self._memory_reports() if p.device_uuid not in lost]

    def process_utilization(self) -> ProcessUtilization:
        """Every device is measured; a process's first reading (nothing to compare with yet) and
        a report without busy seconds leave it out, so it reads as idle."""
        now_s = self._clock.monotonic_s()
        with self._locked() as state:
            shares = {
                sim_mig_uuid(g.uuid, i.gi_id): self._compute_share(g, i)
                for g in state.gpus
                for i in g.instances
            }
            reading: ProcessUtilization = {
                device: {} for g in state.gpus if not g.lost for device in _devices_of(g)
            }
        seen: dict[tuple[str, int], tuple[float, float]] = {}
        for report in self._reports():
            if report.busy_s is None or report.device_uuid not in reading:
                continue
            key = (report.device_uuid, report.pid)
            seen[key] = (now_s, report.busy_s)
            before = self._busy_seen.get(key)
            if before is None or now_s <= before[0]:
                continue
            busy = (report.busy_s - before[1]) / (now_s - before[0])
            share = shares.get(report.device_uuid, 1.0)
            reading[report.device_uuid][report.pid] = min(max(busy, 0.0), 1.0) * share * 100.0
        self._busy_seen = seen
        return reading

    def _memory_reports(self) -> list[GpuProcessStatus]:
        return [
            GpuProcessStatus(device_uuid=r.device_uuid, pid=r.pid, used_memory_mib=r.memory_mib)
            for r in self._reports()
        ]

    def _reports(self) -> list[_ProcessReport]:
        found: list[_ProcessReport] = []
        for report in sorted(self.memory_dir.iterdir()):
            if not report.name.isdigit():
                continue
            pid = int(report.name)
            if start_ticks(pid) is None:
                report.unlink(missing_ok=True)  # the process is gone: so is its memory
                continue
            if not _written_by_owner(report, pid):
                continue  # one tenant reporting memory in another's name: ignored
            try:
                text = report.read_text()
            except OSError:
                continue
            found.extend(_parse_report(pid, text))
        return found

    def possible_placements(self, gpu_index: int) -> dict[int, list[tuple[int, int]]]:
        geometry = self._geometry(gpu_index)
        return {p.profile_id: [(s, p.memory_slices) for s in p.starts] for p in geometry.profiles}

    def mig_profiles(self, gpu_index: int) -> list[DeviceMigProfile]:
        """The catalog's profiles: a simulated GPU is its catalog entry ([] for a GPU without MIG,
        as NVML lists none)."""
        with self._locked() as state:
            model = gpu_model(_gpu(state, gpu_index).model)
        return profiles_of(model) if model is not None else []

    def create_mig_instance(
        self, gpu_index: int, profile_id: int, start_slot: int
    ) -> MigInstanceStatus:
        geometry = self._geometry(gpu_index)
        profile = _profile_by_id(geometry, profile_id, gpu_index)
        with self._locked(write=True) as state:
            gpu = _gpu(state, gpu_index)
            if not gpu.mig_enabled:
                raise GpuDriverError(f"GPU {gpu_index}: MIG mode is disabled: enable it first")
            layout = [
                (_profile_by_id(geometry, i.profile_id, gpu_index), i.start_slot)
                for i in gpu.instances
            ]
            problems = layout_problems(geometry, [*layout, (profile, start_slot)])
            if problems:
                raise GpuDriverError(
                    f"GPU {gpu_index}: cannot create {profile.name} at slot {start_slot} "
                    f"(insufficient resources: {'; '.join(problems)})"
                )
            instance = _SimInstance(
                gi_id=gpu.next_gi_id, profile_id=profile_id, start_slot=start_slot
            )
            gpu.instances.append(instance)
            gpu.next_gi_id += 1
            return self._instance_status(gpu, instance)

    def destroy_mig_instance(self, gpu_index: int, gi_id: int) -> None:
        with self._locked(write=True) as state:
            gpu = _gpu(state, gpu_index)
            instance = next((i for i in gpu.instances if i.gi_id == gi_id), None)
            if instance is None:
                raise GpuDriverError(f"GPU {gpu_index}: no GPU instance {gi_id}")
            device = sim_mig_uuid(gpu.uuid, gi_id)
            users = [p.pid for p in self._memory_reports() if p.device_uuid == device]
            if users:
                raise GpuDriverError(
                    f"GPU {gpu_index}: GPU instance {gi_id} is in use by pids {users}"
                )
            gpu.instances.remove(instance)

    def set_mig_mode(self, gpu_index: int, enabled: bool) -> None:
        with self._locked(write=True) as state:
            gpu = _gpu(state, gpu_index)
            if gpu.instances and not enabled:
                raise GpuDriverError(
                    f"GPU {gpu_index} still has MIG instances: apply a plan without slices on it first"
                )
            if enabled:
                self._geometry_of(gpu.model)  # raises for a card without MIG
            gpu.mig_enabled = enabled

    def client_env(self) -> dict[str, str]:
        return {SIM_DIR_ENV: str(self.sim_dir)}

    def close(self) -> None:
        return None

    # --- fault injection ----------------------------------------------------------------------
    def report_memory(self, pid: int, device_uuid: str, memory_mib: int) -> None:
        """As if process `pid` held `memory_mib` on the device (what a leaking tenant looks like)."""
        path = self.memory_dir / str(pid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{device_uuid} {memory_mib}\n")
        os.replace(tmp, path)

    def lose_gpu(self, gpu_index: int, lost: bool = True) -> None:
        with self._locked(write=True) as state:
            _gpu(state, gpu_index).lost = lost

    # --- internals ------------------------------------------------------------------------------
    def _geometry(self, gpu_index: int) -> MigGeometry:
        with self._locked() as state:
            return self._geometry_of(_gpu(state, gpu_index).model)

    def _status(self, gpu: _SimGpu) -> GpuStatus:
        model = gpu_model(gpu.model)
        return GpuStatus(
            index=gpu.index,
            uuid=gpu.uuid,
            model=gpu.model,
            memory_mib=gpu.memory_mib or (model.memory_mib if model else 0),
            mig_enabled=gpu.mig_enabled,
            lost=gpu.lost,
            instances=[self._instance_status(gpu, i) for i in gpu.instances],
        )

    def _instance_status(self, gpu: _SimGpu, instance: _SimInstance) -> MigInstanceStatus:
        geometry = self._geometry_of(gpu.model)
        profile = _profile_by_id(geometry, instance.profile_id, gpu.index)
        return MigInstanceStatus(
            gi_id=instance.gi_id,
            profile_id=instance.profile_id,
            profile=profile.name,
            start_slot=instance.start_slot,
            size_slots=profile.memory_slices,
            device_uuid=sim_mig_uuid(gpu.uuid, instance.gi_id),
        )

    def _compute_share(self, gpu: _SimGpu, instance: _SimInstance) -> float:
        geometry = self._geometry_of(gpu.model)
        profile = _profile_by_id(geometry, instance.profile_id, gpu.index)
        return profile.compute_slices / geometry.compute_slices

    @staticmethod
    def _geometry_of(model_name: str) -> MigGeometry:
        model = gpu_model(model_name)
        if model is None or model.mig is None:
            raise GpuDriverError(f"{model_name} has no MIG")
        return model.mig

    @contextmanager
    def _locked(self, write: bool = False) -> Iterator[_SimState]:
        with (self.sim_dir / "gpus.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = _SimState.model_validate_json(self._file.read_text())
            yield state
            if write:
                self._save(state)

    def _save(self, state: _SimState) -> None:
        tmp = self._file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.model_dump(), indent=1))
        os.replace(tmp, self._file)


@dataclass(frozen=True, slots=True)
class _ProcessReport:
    """One line of a process's report: what it holds on one device."""

    pid: int
    device_uuid: str
    memory_mib: int
    busy_s: float | None  # None: the report does not say


def _parse_report(pid: int, text: str) -> list[_ProcessReport]:
    """A report's lines; none while it is being written or if any line is not a report."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        try:
            if len(fields) == 2:
                found.append(_ProcessReport(pid, fields[0], int(fields[1]), None))
            elif len(fields) == 3:
                found.append(_ProcessReport(pid, fields[0], int(fields[1]), float(fields[2])))
            else:
                return []
        except ValueError:
            return []
    return found


def _devices_of(gpu: _SimGpu) -> list[str]:
    """The devices processes run on: the GPU, or its MIG devices when in MIG mode."""
    if gpu.mig_enabled:
        return [sim_mig_uuid(gpu.uuid, i.gi_id) for i in gpu.instances]
    return [gpu.uuid]


def models_memory(plan: Plan) -> dict[str, int]:
    """Each GPU model's memory in MiB, as the plan has it (added models included)."""
    return {gpu.model: gpu.memory_mib for gpu in plan.gpus}


def _initial_state(node: NodeSpec, mig_on: set[int], memory_mib: Mapping[str, int]) -> _SimState:
    gpus: list[_SimGpu] = []
    for group in node.gpus:
        model = gpu_model(group.model)
        memory = memory_mib.get(group.model) or (model.memory_mib if model else 0)
        for k in range(group.count):
            index = len(gpus)
            can_mig = model is not None and model.mig is not None
            wanted = group.mig is MigModeSpec.ON or (
                group.mig is MigModeSpec.AUTO and index in mig_on
            )
            gpus.append(
                _SimGpu(
                    index=index,
                    uuid=group.uuids[k] if group.uuids else sim_gpu_uuid(node.name, index),
                    model=group.model,
                    memory_mib=memory,
                    mig_enabled=can_mig and wanted,
                )
            )
    return _SimState(node=node.name, gpus=gpus)


def _gpu(state: _SimState, index: int) -> _SimGpu:
    for gpu in state.gpus:
        if gpu.index == index:
            return gpu
    raise GpuDriverError(f"no GPU {index} on simulated node {state.node}")


def _profile_by_id(geometry: MigGeometry, profile_id: int, gpu_index: int) -> MigProfile:
    profile = geometry.profile_by_id(profile_id)
    if profile is None:
        raise GpuDriverError(f"GPU {gpu_index}: no MIG profile with id {profile_id}")
    return profile


def _written_by_owner(report: Path, pid: int) -> bool:
    """Whether the report's file belongs to the user the process runs as (or to root, which
    writes reports for fault injection)."""
    try:
        owner = report.stat().st_uid
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return owner in (0, int(line.split()[2]))  # the effective uid
    return False
