"""How the host runtime runs a workload: CPU and memory limits, restarts, network, and the host-wide
runtime settings (`host:` in gpuplex.yaml)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictFloat, StrictInt, model_validator

from gpuplex.core.spec.fields import SpecModel


class LimitsSpec(SpecModel):
    """Host resources for one replica, enforced by its cgroup (or the container's)."""

    cpu_cores: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, le=1024, description="CPU time, in cores (0.5 = half a core)."
    )
    memory_gib: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Host memory; the kernel kills the replica above it."
    )
    pids: StrictInt | None = Field(default=None, ge=8, description="Most processes and threads.")


class RestartPolicy(StrEnum):
    ALWAYS = "always"  # restart whatever the exit (servers)
    ON_FAILURE = "on-failure"  # restart unless it exited 0 (jobs)
    NEVER = "never"


class RestartSpec(SpecModel):
    """Restart with exponential backoff; more than `max_restarts` exits within `window_s` is a crash
    loop and the replica is marked failed until the spec is applied again."""

    policy: RestartPolicy = RestartPolicy.ALWAYS
    backoff_initial_s: StrictFloat | StrictInt = Field(default=1.0, gt=0, le=3600)
    backoff_max_s: StrictFloat | StrictInt = Field(default=60.0, gt=0, le=86400)
    max_restarts: StrictInt = Field(default=5, ge=0, le=1000)
    window_s: StrictFloat | StrictInt = Field(default=300.0, gt=0)
    stop_grace_s: StrictFloat | StrictInt = Field(
        default=10.0, ge=0, le=3600, description="SIGTERM, then SIGKILL after this long."
    )

    @model_validator(mode="after")
    def _backoff_order(self) -> RestartSpec:
        if self.backoff_max_s < self.backoff_initial_s:
            raise ValueError("backoff_max_s must be >= backoff_initial_s")
        return self


class Network(StrEnum):
    HOST = "host"  # the host's network (model servers the gateway reaches)
    NONE = "none"  # a network namespace of its own with loopback only (batch and training)


class Runtime(StrEnum):
    PROCESS = "process"
    DOCKER = "docker"
    PODMAN = "podman"


class HostSpec(SpecModel):
    """Settings of the host runtime on each GPU server."""

    runtime: Runtime = Field(
        default=Runtime.PROCESS,
        description="process, or a container engine for workloads with an image.",
    )
    vram_tolerance_percent: StrictInt = Field(
        default=10,
        ge=0,
        le=100,
        description="The VRAM watchdog stops a share using this much more than its planned memory.",
    )
    log_max_mib: StrictInt = Field(
        default=64, ge=1, description="Rotate a workload log above this."
    )
    log_keep: StrictInt = Field(
        default=3, ge=1, le=100, description="Rotated logs kept per workload."
    )
