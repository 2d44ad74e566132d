"""Values the host runtime decides over: what one server should run (desired), what it has
(observed GPUs and processes) and what gpuplex remembers about each replica (records)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from gpuplex.core.plan.model import MigSlicePlan, Mode, replica_label
from gpuplex.core.spec.runtime import HostSpec, LimitsSpec, Network, RestartSpec, Runtime
from gpuplex.core.spec.workloads import HealthCheckSpec


class ApplyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Binding(ApplyModel):
    """Where a replica runs on this host, as the plan decided."""

    mode: Mode
    gpu_indices: list[int]
    mig: MigSlicePlan | None = None
    memory_mib: int
    thread_percent: int | None = None

    def describe(self) -> str:
        gpus = ",".join(str(i) for i in self.gpu_indices)
        if self.mig is not None:
            return f"gpu {gpus} mig {self.mig.profile}@{self.mig.start_slot}"
        return f"gpu {gpus} {self.mode}"


class WorkloadDesired(ApplyModel):
    """One replica as it should run: command, environment, limits, GPU binding. A replica whose
    running record was started from a different value is restarted."""

    tenant: str
    workload: str
    replica: int
    binding: Binding
    argv: list[str]
    runtime: Runtime = Runtime.PROCESS  # docker or podman when the workload has an image
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = None
    health: HealthCheckSpec | None = None
    health_port: int | None = None
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    restart: RestartSpec = Field(default_factory=RestartSpec)
    network: Network = Network.HOST
    unix_user: str | None = None
    #: host folders granted to it in the spec (`reads`), absolute: seen read-only, and checked
    #: readable by its user before anything changes
    reads: list[str] = Field(default_factory=list)
    #: a job's replica (its file a tenant wrote at run time, `JobWorkloadSpec`): always in a
    #: network namespace of its own, and none of the host paths it names is bound into its /tmp
    job: bool = False

    @property
    def label(self) -> str:
        return replica_label(self.tenant, self.workload, self.replica)


class GpuDesired(ApplyModel):
    index: int
    model: str
    mig_slices: list[MigSlicePlan] | None  # None: the plan runs this GPU whole (or leaves it idle)
    mps: bool  # at least one MPS client: the GPU needs its MPS control daemon


class DesiredHost(ApplyModel):
    node: str
    gpus: list[GpuDesired]
    workloads: list[WorkloadDesired]
    settings: HostSpec = Field(default_factory=HostSpec)
    #: placed replicas this host will not run, and why
    notes: list[str] = Field(default_factory=list)

    def mig_gpus(self) -> set[int]:
        """The GPUs the plan puts MIG slices on."""
        return {gpu.index for gpu in self.gpus if gpu.mig_slices}


class MigInstanceStatus(ApplyModel):
    gi_id: int
    profile_id: int
    profile: str
    start_slot: int
    size_slots: int
    device_uuid: str  # the MIG device UUID for CUDA_VISIBLE_DEVICES


class GpuStatus(ApplyModel):
    index: int
    uuid: str
    model: str  # catalog name where known, else the name the driver reports
    memory_mib: int
    mig_enabled: bool
    lost: bool = False
    instances: list[MigInstanceStatus] = Field(default_factory=list)


class GpuProcessStatus(ApplyModel):
    device_uuid: str  # the GPU's UUID, or the MIG device's
    pid: int
    used_memory_mib: int


class Phase(StrEnum):
    STARTING = "starting"  # launched; health not yet confirmed
    RUNNING = "running"
    BACKOFF = "backoff"  # exited; restarts at next_start_at_s
    FAILED = "failed"  # crash loop or unstartable: waits for a changed spec
    COMPLETED = "completed"  # exited and its restart policy says stay down
    #: asked to stop (SIGTERM) and given until stop_deadline_s; SIGKILL then, and the record goes
    #: once nothing of it is left (a job: the host does other work meanwhile)
    STOPPING = "stopping"


LIVE_PHASES = frozenset({Phase.STARTING, Phase.RUNNING})


class ExitStatus(ApplyModel):
    code: int | None = None
    signal: int | None = None
    note: str | None = None  # e.g. "killed by the VRAM watchdog", "exit status unknown (adopted)"

    def shell_code(self) -> int | None:
        """The status a shell would give: the exit code, or 128 + the signal's number."""
        return 128 + self.signal if self.signal is not None else self.code

    def describe(self) -> str:
        parts = []
        if self.signal is not None:
            parts.append(f"killed by signal {self.signal}")
        elif self.code is not None:
            parts.append(f"exit code {self.code}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts) or "exited"


class WorkloadRecord(ApplyModel):
    """What gpuplex remembers about one replica, persisted so that a restarted gpuplex re-adopts it."""

    desired: WorkloadDesired  # what it was started from
    phase: Phase
    pid: int | None = None
    start_ticks: int | None = None  # /proc/<pid>/stat starttime: tells a reused pid apart
    started_at_s: float | None = None
    device: str | None = None  # CUDA device it was given (GPU or MIG UUID)
    cgroups: list[str] = Field(default_factory=list)
    limits_applied: str | None = None  # read back from the cgroup filesystem after the start
    restarts: int = 0
    exits_at_s: list[float] = Field(default_factory=list)  # exits inside the crash-loop window
    last_exit: str | None = None
    #: the last exit's status as a shell gives it (128 + N for signal N); None when unknown
    last_exit_code: int | None = None
    next_start_at_s: float | None = None
    health_failures: int = 0  # consecutive
    health_checks: int = 0
    healthy_at_s: float | None = None
    message: str | None = None
    #: while stopping: when SIGKILL follows the SIGTERM it was sent, and why it is stopped
    stop_deadline_s: float | None = None
    stop_reason: str | None = None

    @property
    def label(self) -> str:
        return self.desired.label


class FinishedRun(ApplyModel):
    """How the last run of a replica that is never restarted (a job) ended, kept until the
    control plane has taken note of it: through a restart of gpuplex, a `host down`, or the
    replica's record being forgotten."""

    label: str
    #: the run's attempt as its environment named it (a job's GPUPLEX_JOB_ATTEMPT)
    attempt: int | None = None
    started_at_s: float | None = None
    ended_at_s: float
    exit_code: int | None = None  # as a shell gives it: 128 + N for signal N; None: unknown
    note: str | None = None  # how it ended in words, when that says more than the code
    #: why gpuplex stopped it (it left the desired state); None: it ended by itself
    stopped_by: str | None = None
    #: it was gone and nothing recorded how it ended (no exit status, no exit file)
    lost: bool = False


class MpsDaemonRecord(ApplyModel):
    gpu_index: int
    gpu_uuid: str
    pid: int
    start_ticks: int | None = None
    started_at_s: float
    restarts: int = 0
    pipe_dir: str
    log_dir: str
