"""A job file: bursty work a tenant submits at run time (`gpuplex job submit`), held to the spec's
`queues:`. Its GPU request takes any form a workload's does, and must suit the tenant's isolation
as a workload's must (`check_job`).

A job file is written by a tenant, not by the operator, so its shape is bounded (`MAX_*`): a few
hundred environment variables and command arguments of sane size, no NUL anywhere (exec refuses
it, and so does PostgreSQL's JSON), and none of the variables gpuplex sets to confine a process to
its GPU, MIG slice or MPS share (`RESERVED_ENV`): a job cannot widen what it sees by naming them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from pydantic import (
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.parse import did_you_mean, validation_problems
from gpuplex.core.spec.requests import CandidateFinder, check_request
from gpuplex.core.spec.runtime import LimitsSpec, Network
from gpuplex.core.spec.workloads import GpuRequestSpec, Pattern, WorkloadKind, WorkloadSpec
from gpuplex.errors import FieldPath, SpecProblem

#: The most environment variables a job may set, the longest name and value, and all of them.
MAX_ENV_VARIABLES = 128
MAX_ENV_NAME_CHARS = 128
MAX_ENV_VALUE_CHARS = 32 * 1024
MAX_ENV_TOTAL_CHARS = 64 * 1024
#: The most command arguments (the program included), the longest one, and all of them.
MAX_COMMAND_ARGUMENTS = 1024
MAX_ARGUMENT_CHARS = 32 * 1024
MAX_COMMAND_TOTAL_CHARS = 128 * 1024
#: An image reference: a registry host, a path, a tag and a digest fit well inside this.
MAX_IMAGE_CHARS = 512
#: The most retries a job may ask for, and the longest waits between them.
MAX_BACKOFF_LIMIT = 100
MAX_BACKOFF_S = 86_400
#: Kubernetes Jobs' retry delays: 10 s, doubling, at most six minutes.
DEFAULT_BACKOFF_INITIAL_S = 10
DEFAULT_BACKOFF_MAX_S = 360

#: A POSIX environment variable name.
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables gpuplex sets to confine a process to its GPUs, MIG slice or MPS share, or to tell it
#: who it is: a job naming one could widen what it sees (a name, or a prefix ending in `_`).
RESERVED_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MPS_",
    "NVIDIA_",
    "GPUPLEX_",
)


def reserved_env_name(name: str) -> bool:
    upper = name.upper()
    return any(upper == r or (r.endswith("_") and upper.startswith(r)) for r in RESERVED_ENV)


def _shown_name(name: str) -> str:
    """A name for a message, cut short: an error never echoes a whole oversized input."""
    return repr(name if len(name) <= 40 else name[:40] + "...")


class JobSpec(SpecModel):
    tenant: DnsLabel
    name: DnsLabel | None = Field(default=None, description="A name to find it by (not unique).")
    gpu: GpuRequestSpec
    command: list[str] | None = Field(
        default=None, max_length=MAX_COMMAND_ARGUMENTS, description="Program and arguments."
    )
    image: str | None = Field(
        default=None,
        max_length=MAX_IMAGE_CHARS,
        description="Container image (docker or podman).",
    )
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV_VARIABLES)
    priority: StrictInt = Field(
        default=0, ge=-1000, le=1000, description="Higher starts first within the tenant's queue."
    )
    max_runtime_s: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Stopped (SIGTERM, then SIGKILL) after this long."
    )
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    network: Network = Field(default=Network.NONE, description="none: loopback only.")
    backoff_limit: StrictInt = Field(
        default=0,
        ge=0,
        le=MAX_BACKOFF_LIMIT,
        description="Retries after a failed attempt (Kubernetes Jobs' backoffLimit).",
    )
    backoff_initial_s: StrictFloat | StrictInt = Field(
        default=DEFAULT_BACKOFF_INITIAL_S,
        gt=0,
        le=MAX_BACKOFF_S,
        description="The wait before the first retry; it doubles for each one after.",
    )
    backoff_max_s: StrictFloat | StrictInt = Field(
        default=DEFAULT_BACKOFF_MAX_S,
        gt=0,
        le=MAX_BACKOFF_S,
        description="The longest wait between retries.",
    )

    @field_validator("command")
    @classmethod
    def _bounded_command(cls, command: list[str] | None) -> list[str] | None:
        if command is None:
            return None
        for n, argument in enumerate(command):
            if len(argument) > MAX_ARGUMENT_CHARS:
                raise ValueError(
                    f"argument {n} is {len(argument)} characters: at most {MAX_ARGUMENT_CHARS}"
                )
            if "\x00" in argument:
                raise ValueError(f"argument {n} holds a NUL character, which no program receives")
        total = sum(map(len, command))
        if total > MAX_COMMAND_TOTAL_CHARS:
            raise ValueError(
                f"the arguments are {total} characters in all: at most {MAX_COMMAND_TOTAL_CHARS}"
            )
        return command

    @field_validator("image")
    @classmethod
    def _one_word_image(cls, image: str | None) -> str | None:
        if image is not None and (
            not image or any(c.isspace() or not c.isprintable() for c in image)
        ):
            raise ValueError("an image reference is one word: no spaces or control characters")
        return image

    @field_validator("env")
    @classmethod
    def _bounded_env(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if len(name) > MAX_ENV_NAME_CHARS or not _ENV_NAME.match(name):
                raise ValueError(
                    f"{_shown_name(name)} is not a variable name: letters, digits and '_', "
                    f"not starting with a digit, at most {MAX_ENV_NAME_CHARS} characters"
                )
            if reserved_env_name(name):
                raise ValueError(
                    f"{name} is set by gpuplex to confine the job to its GPU share: a job may "
                    f"not set it (nor any of {', '.join(RESERVED_ENV)})"
                )
            if len(value) > MAX_ENV_VALUE_CHARS:
                raise ValueError(
                    f"the value of {name} is {len(value)} characters: at most {MAX_ENV_VALUE_CHARS}"
                )
            if "\x00" in value:
                raise ValueError(f"the value of {name} holds a NUL character")
        total = sum(len(name) + len(value) for name, value in env.items())
        if total > MAX_ENV_TOTAL_CHARS:
            raise ValueError(
                f"the variables are {total} characters in all: at most {MAX_ENV_TOTAL_CHARS}"
            )
        return env

    @model_validator(mode="after")
    def _something_to_run(self) -> JobSpec:
        if not self.command and not self.image:
            raise ValueError("give command (a program and its arguments) or image")
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError(
                f"backoff_max_s ({self.backoff_max_s:g}) is below backoff_initial_s "
                f"({self.backoff_initial_s:g}): the longest wait cannot be shorter than the first"
            )
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
