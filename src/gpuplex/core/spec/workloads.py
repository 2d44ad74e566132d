"""Workloads: what a tenant runs and what GPU it asks for."""

from __future__ import annotations

import posixpath
from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field, StrictFloat, StrictInt, model_validator

from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.runtime import LimitsSpec, Network, RestartSpec


class WorkloadKind(StrEnum):
    INFERENCE = "inference"
    TRAINING = "training"
    BATCH = "batch"
    NOTEBOOK = "notebook"


class Pattern(StrEnum):
    LONG_RUNNING = "long-running"
    BURSTY = "bursty"


class GpuRequestSpec(SpecModel):
    """Exactly one form: whole GPUs (`count`); a share (`memory_gib`, optional `compute_percent`);
    or an explicit MIG profile (`mig_profile`)."""

    count: StrictInt | None = Field(
        default=None, ge=1, le=64, description="Whole GPUs on one node."
    )
    memory_gib: StrictFloat | None = Field(
        default=None, gt=0, description="GPU memory for a share."
    )
    compute_percent: StrictInt | None = Field(
        default=None, ge=1, le=100, description="SM share (MPS thread %); with memory_gib."
    )
    mig_profile: str | None = Field(
        default=None, description="e.g. 3g.40gb; must exist on the GPU."
    )
    model: str | None = Field(
        default=None,
        description="Only GPUs of this catalog model (any model in the pool if unset).",
    )

    @model_validator(mode="after")
    def _one_form(self) -> GpuRequestSpec:
        forms = [
            name
            for name, value in (
                ("count", self.count),
                ("memory_gib", self.memory_gib),
                ("mig_profile", self.mig_profile),
            )
            if value is not None
        ]
        if len(forms) != 1:
            raise ValueError(
                "give exactly one of count (whole GPUs), memory_gib (a share, with optional "
                f"compute_percent) or mig_profile; got {', '.join(forms) if forms else 'none'}"
            )
        if self.compute_percent is not None and self.memory_gib is None:
            raise ValueError("compute_percent goes with memory_gib (a share of one GPU)")
        return self


class ServeSpec(SpecModel):
    """What an inference workload serves. `lora_of` loads this workload as a LoRA adapter on another
    workload's base model server (`tenant/workload`); such a workload asks for no GPU of its own."""

    model: str = Field(min_length=1, description="The model name tenants send in requests.")
    base_model: str | None = Field(default=None, description="The base model the server loads.")
    lora_of: str | None = Field(
        default=None, description="tenant/workload serving the shared base."
    )
    accepts_adapters: bool = Field(
        default=False, description="This server hosts other workloads' LoRA adapters."
    )
    port: StrictInt = Field(default=8000, ge=1, le=65535)


class HealthCheckSpec(SpecModel):
    """Readiness, then liveness: a replica is `starting` until its first healthy answer, and only
    then do failed checks count. One that has not answered within `start_timeout_s` of its start
    is restarted (the stop counts as an exit)."""

    http_path: str = Field(default="/health", pattern=r"^/")
    port: StrictInt | None = Field(default=None, ge=1, le=65535)
    interval_s: StrictFloat = Field(default=10.0, gt=0)
    timeout_s: StrictFloat = Field(default=2.0, gt=0)
    failure_threshold: StrictInt = Field(
        default=3,
        ge=1,
        le=100,
        description="Consecutive failed checks, once it has been ready, before a restart.",
    )
    start_timeout_s: StrictFloat = Field(
        default=600.0,
        gt=0,
        description="How long a replica may take to answer its first check (a model server "
        "loading its weights) before it is restarted.",
    )


#: How the workload a job runs as is named (`job-<id>`) and found in a plan, its host status and
#: its logs: a name starting with it is reserved, and a workload of the spec may not take one.
JOB_WORKLOAD_PREFIX = "job-"

#: Longest a folder granted in `reads` may be, and how many one workload may have.
MAX_READ_PATH_CHARS = 4096
MAX_READS = 32


def _check_read_folder(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path: give the folder from / on")
    if value == "/" or "\0" in value or len(value) > MAX_READ_PATH_CHARS:
        raise ValueError(f"{value!r} cannot be granted: name one folder below /")
    if posixpath.normpath(value) != value:
        raise ValueError(
            f"{value!r} is not written plainly: write {posixpath.normpath(value)!r} "
            "(no '..', '.', doubled or trailing '/')"
        )
    return value


#: An absolute, plainly written folder (no `..`, no trailing `/`), not / itself.
ReadFolder = Annotated[str, AfterValidator(_check_read_folder)]


class WorkloadSpec(SpecModel):
    name: DnsLabel
    kind: WorkloadKind = WorkloadKind.INFERENCE
    pattern: Pattern = Pattern.LONG_RUNNING
    pool: DnsLabel | None = Field(
        default=None, description="Defaults to the pattern's pool when the fleet has one."
    )
    gpu: GpuRequestSpec | None = Field(
        default=None, description="Required unless serve.lora_of puts this on a shared base."
    )
    replicas: StrictInt = Field(default=1, ge=0, le=1000)
    serve: ServeSpec | None = None
    command: list[str] | None = None
    image: str | None = None
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment; {port}, {replica} and {memory_mib} are filled in.",
    )
    health: HealthCheckSpec | None = None
    reads: list[ReadFolder] = Field(
        default_factory=list,
        max_length=MAX_READS,
        description="Folders on the host this workload's processes read (its model, its LoRA "
        "adapters), absolute; granted read-only. `host apply` and `gpuplex up` refuse a spec "
        "whose tenant user cannot read one. Nothing else of the host's /tmp is kept visible.",
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    restart: RestartSpec = Field(default_factory=RestartSpec)
    network: Network = Field(
        default=Network.HOST, description="none: loopback only (not for served workloads)."
    )
