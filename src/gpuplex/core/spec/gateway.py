"""The gateway's settings (`gateway:` in gpuplex.yaml): where it listens, how many workers, how
long it waits, how deep the queues are. Connection URLs with credentials (store, Redis) are not
here: they come from the command line or the environment, never from a file that gets committed."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictFloat, StrictInt

from gpuplex.core.spec.fields import SpecModel


class LimiterBackend(StrEnum):
    MEMORY = "memory"  # in the gateway process: exact with one worker
    REDIS = "redis"  # shared by every worker and replica (URL from --redis-url / GPUPLEX_REDIS_URL)


class GatewaySpec(SpecModel):
    host: str = Field(default="127.0.0.1", description="Address to listen on.")
    port: StrictInt = Field(default=8080, ge=1, le=65535)
    workers: StrictInt = Field(
        default=1, ge=1, le=64, description="Processes; more than 1 needs limiter: redis."
    )
    limiter: LimiterBackend = LimiterBackend.MEMORY
    backend_host: str = Field(
        default="127.0.0.1", description="Where the host runtime's model servers listen."
    )
    backends: dict[str, list[str]] = Field(
        default_factory=dict,
        description="tenant/workload -> replica URLs, where they are not on backend_host.",
    )
    max_body_kib: StrictInt = Field(default=1024, ge=1, le=1024 * 1024)
    body_timeout_s: StrictFloat | StrictInt = Field(
        default=10, gt=0, description="The whole request body must arrive within this."
    )
    connect_timeout_s: StrictFloat | StrictInt = Field(default=5, gt=0)
    upstream_timeout_s: StrictFloat | StrictInt = Field(
        default=300, gt=0, description="Longest a model server may take to answer."
    )
    default_max_tokens: StrictInt = Field(
        default=512, ge=1, description="Tokens reserved for a request that sends no max_tokens."
    )
    max_in_flight_per_backend: StrictInt = Field(
        default=64, ge=1, description="Requests sent to one model server workload at once."
    )
    max_waiting_per_tenant: StrictInt = Field(
        default=256, ge=1, description="Queue length per tenant and backend; beyond it, 429."
    )
    max_wait_s: StrictFloat | StrictInt = Field(
        default=30, gt=0, description="Longest a request waits in its queue; then 429."
    )
    breaker_failures: StrictInt = Field(
        default=5, ge=1, description="Consecutive failures that open a replica's breaker."
    )
    breaker_open_s: StrictFloat | StrictInt = Field(default=5, gt=0)
    health_interval_s: StrictFloat | StrictInt = Field(default=2, gt=0)
    metrics_from: list[str] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1/128"],
        description="Networks allowed to read /metrics (it names every tenant).",
    )
    failed_auth_per_min: StrictInt = Field(
        default=30, ge=1, description="Failed key checks per client address before 429."
    )
