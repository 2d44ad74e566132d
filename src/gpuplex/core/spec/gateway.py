"""The gateway's settings (`gateway:` in gpuplex.yaml): where it listens, how many workers, how
long it waits, how deep the queues are. Connection URLs with credentials (store, Redis) are not
here: they come from the command line or the environment, never from a file that gets committed."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, StrictFloat, StrictInt, model_validator

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
        default=512,
        ge=1,
        description=(
            "Completion tokens a request that sets no limit may generate: the gateway writes it "
            "into the forwarded request (lowered to fit the caller's tokens_per_min)."
        ),
    )
    message_overhead_tokens: StrictInt = Field(
        default=8,
        ge=0,
        le=4096,
        description=(
            "Tokens a model's chat template adds per message (or per prompt of a list) beyond "
            "its text: reserved with the message's bytes, an upper bound on its tokens."
        ),
    )
    request_overhead_tokens: StrictInt = Field(
        default=128,
        ge=0,
        le=65536,
        description=(
            "Tokens a model's template adds once per request (BOS, the generation prompt, a "
            "default system prompt, tool instructions): reserved with every request."
        ),
    )
    max_reply_mib: StrictInt = Field(
        default=64,
        ge=1,
        le=4096,
        description="Largest whole reply taken from a model server; past it the client gets 502.",
    )
    max_event_kib: StrictInt = Field(
        default=1024,
        ge=1,
        le=1024 * 1024,
        description="Longest server-sent event taken from a model server's stream.",
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
        default_factory=list,
        description=(
            "Networks that read /metrics without the metrics token (it names every tenant); "
            "default none, since tenant workloads may share the host's network, loopback included."
        ),
    )
    failed_auth_per_min: StrictInt = Field(
        default=30, ge=1, description="Failed key checks per client address before 429."
    )
    # The front door (gpuplex/http_guard.py): what any client, with or without a key, may hold.
    max_request_line_kib: StrictInt = Field(
        default=8, ge=1, le=1024, description="The request line's target; beyond it, 414."
    )
    max_header_kib: StrictInt = Field(
        default=32, ge=1, le=1024, description="The request line and headers together; beyond, 431."
    )
    max_headers: StrictInt = Field(
        default=100, ge=1, le=1000, description="Header lines in one request; beyond it, 431."
    )
    header_timeout_s: StrictFloat | StrictInt = Field(
        default=10,
        gt=0,
        le=300,
        description="A request head must arrive within this of the connection opening (or of "
        "its first byte on a kept-alive connection); else the connection is closed.",
    )
    keep_alive_timeout_s: StrictInt = Field(
        default=30, ge=1, le=3600, description="An idle kept-alive connection closes after this."
    )
    max_connections: StrictInt = Field(
        default=8192,
        ge=1,
        le=1_000_000,
        description="Open client connections per worker, lowered to what the file limit allows; "
        "at the cap the oldest connection waiting for a request is closed, else 503.",
    )
    max_connections_per_client: StrictInt = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="Open connections per client address (IPv6: per /64) per worker; beyond, "
        "503. Raise it behind a proxy that sends everyone's requests from few addresses.",
    )

    @model_validator(mode="after")
    def _connection_caps(self) -> GatewaySpec:
        if self.max_connections_per_client > self.max_connections:
            raise ValueError("max_connections_per_client must be <= max_connections")
        return self
