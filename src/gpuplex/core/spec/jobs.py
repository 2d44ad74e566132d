"""A job file: bursty work a tenant submits at run time (`gpuplex job submit`), held to the spec's
`queues:`. Its GPU request takes any form a workload's does, and must suit the tenant's isolation
as a workload's must (`check_job`)."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import Field, StrictFloat, StrictInt, ValidationError, model_validator

from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.parse import did_you_mean, validation_problems
from gpuplex.core.spec.requests import CandidateFinder, check_request
from gpuplex.core.spec.runtime import LimitsSpec, Network
from gpuplex.core.spec.workloads import GpuRequestSpec, Pattern, WorkloadKind, WorkloadSpec
from gpuplex.errors import FieldPath, SpecProblem


class JobSpec(SpecModel):
    tenant: DnsLabel
    name: DnsLabel | None = Field(default=None, description="A name to find it by (not unique).")
    gpu: GpuRequestSpec
    command: list[str] | None = Field(default=None, description="Program and arguments.")
    image: str | None = Field(default=None, description="Container image (docker or podman).")
    env: dict[str, str] = Field(default_factory=dict)
    priority: StrictInt = Field(
        default=0, ge=-1000, le=1000, description="Higher starts first within the tenant's queue."
    )
    max_runtime_s: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Stopped (SIGTERM, then SIGKILL) after this long."
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    network: Network = Field(default=Network.NONE, description="none: loopback only.")

    @model_validator(mode="after")
    def _something_to_run(self) -> JobSpec:
        if not self.command and not self.image:
            raise ValueError("give command (a program and its arguments) or image")
        return self

    def as_workload(self, name: str, grace_s: float) -> WorkloadSpec:
        """The job as a one-replica batch workload of its tenant, never restarted."""
        return WorkloadSpec.model_validate(
            {
                "name": name,
                "kind": WorkloadKind.BATCH,
                "pattern": Pattern.BURSTY,
                "gpu": self.gpu,
                "replicas": 1,
                "command": self.command,
                "image": self.image,
                "env": self.env,
                "limits": self.limits,
                "network": self.network,
                "restart": {"policy": "never", "stop_grace_s": grace_s},
            }
        )


def check_job(spec: GpuplexSpec, job: JobSpec) -> Iterator[SpecProblem]:
    """Problems of a job against the applied spec: its tenant, its queue, its GPU request."""
    tenants = {t.name: t for t in spec.tenants}
    tenant = tenants.get(job.tenant)
    if tenant is None:
        yield SpecProblem(
            ("tenant",), f"unknown tenant {job.tenant!r}{did_you_mean(job.tenant, list(tenants))}"
        )
        return
    queued = {leaf.name for o in spec.queues.organisations for t in o.teams for leaf in t.tenants}
    if job.tenant not in queued:
        yield SpecProblem(
            ("tenant",), f"{job.tenant} has no queue in the spec's queues: it cannot run jobs"
        )
    path: FieldPath = ()
    yield from check_request(spec, tenant, job.as_workload("job", 0.0), path, CandidateFinder(spec))


def parse_job(data: object, tenant: str | None = None) -> JobSpec | list[SpecProblem]:
    """A job file's data as a JobSpec, or every problem with its field path. `tenant`, when
    given, fills in a job file that names none; a file naming another tenant is a problem."""
    if data is None:
        return [SpecProblem((), "the file is empty: expected a mapping with tenant, gpu, command")]
    if not isinstance(data, dict):
        kind = type(data).__name__
        return [SpecProblem((), f"expected a mapping (tenant:, gpu:, ...) at the top, got {kind}")]
    if tenant is not None:
        named = data.get("tenant")
        if named is not None and named != tenant:
            return [SpecProblem(("tenant",), f"the job names tenant {named!r}, not {tenant!r}")]
        data = {**data, "tenant": tenant}
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        return validation_problems(error, JobSpec)
