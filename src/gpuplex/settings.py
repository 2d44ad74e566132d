"""Typed settings, built once in `main` and passed down. The only module that reads the environment."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from gpuplex.errors import GatewayError

#: What a tenant process inherits from gpuplex's own environment; nothing else (no secrets) passes.
INHERITED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ")


def inherited_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}


def full_environment() -> dict[str, str]:
    """All of this process's environment: for a child that is gpuplex itself (never a tenant)."""
    return dict(os.environ)


def environment_value(name: str) -> str | None:
    return os.environ.get(name)


HOME_VARIABLE = "GPUPLEX_HOME"
STORE_URL_VARIABLE = "GPUPLEX_STORE_URL"
#: Where the commands that ask the running control plane's API (`gpuplex statement`) find it.
SERVER_URL_VARIABLE = "GPUPLEX_SERVER_URL"
TOKEN_VARIABLE = "GPUPLEX_TOKEN"  # noqa: S105 - a variable's name, not a secret
#: The control plane's address when neither --server nor $GPUPLEX_SERVER_URL says (`gpuplex up`'s).
DEFAULT_SERVER_URL = "http://127.0.0.1:8090"


def default_state_dir() -> Path:
    """/var/lib/gpuplex for root; else $XDG_STATE_HOME/gpuplex (~/.local/state/gpuplex)."""
    if os.geteuid() == 0:
        return Path("/var/lib/gpuplex")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuplex"


@dataclass(frozen=True, slots=True)
class GpuplexHome:
    """Where one gpuplex instance keeps its state, laid out the way `gpuplex up` makes it. Naming
    a path creates nothing: whoever writes there makes its folder."""

    root: Path

    @property
    def store_path(self) -> Path:
        return self.root / "store" / "gpuplex.db"

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.store_path}"

    @property
    def host_dir(self) -> Path:
        """The host runtime's state directory (`gpuplex host --state-dir`)."""
        return self.root / "host"

    @property
    def gateway_dir(self) -> Path:
        return self.root / "gateway"

    @property
    def spool_dir(self) -> Path:
        return self.gateway_dir / "spool"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"


def gpuplex_home(root: Path | None = None) -> GpuplexHome:
    """The instance every command works on: `root` when given (an explicit --state-dir), else
    $GPUPLEX_HOME, else the default state directory. Always absolute."""
    chosen = root or Path(os.environ.get(HOME_VARIABLE) or default_state_dir())
    return GpuplexHome(chosen.expanduser().absolute())


@dataclass(frozen=True, slots=True)
class HostSettings:
    state_dir: Path
    node: str | None = None  # the fleet node this server is; None: the spec's only node
    driver: str = "auto"  # auto | nvml | sim
    interval_s: float = 1.0  # reconcile period

    def with_driver(self, driver: str) -> HostSettings:
        return replace(self, driver=driver)


#: Where `gpuplex login` keeps this user's token (else ~/.config/gpuplex/login.json).
LOGIN_FILE_VARIABLE = "GPUPLEX_LOGIN_FILE"


def login_file() -> Path:
    """Where `gpuplex login` keeps the signed-in user's token: $GPUPLEX_LOGIN_FILE, else
    $XDG_CONFIG_HOME/gpuplex/login.json (~/.config by default)."""
    chosen = os.environ.get(LOGIN_FILE_VARIABLE)
    if chosen:
        return Path(chosen)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "gpuplex" / "login.json"


def default_store_url() -> str:
    """$GPUPLEX_STORE_URL, else the home's SQLite store (HOME/store/gpuplex.db)."""
    return os.environ.get(STORE_URL_VARIABLE) or gpuplex_home().store_url


def store_url_is_explicit() -> bool:
    """$GPUPLEX_STORE_URL is set: the store is not the home's."""
    return bool(os.environ.get(STORE_URL_VARIABLE))


def prometheus_multiproc_dir() -> str | None:
    """Where worker processes keep their Prometheus metrics (prometheus-client's own variable)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR")


def export_for_workers(values: dict[str, str]) -> None:
    """Set environment variables that worker processes started after this inherit."""
    os.environ.update(values)


DCGM_URLS_VARIABLE = "GPUPLEX_DCGM_URLS"


def dcgm_urls_from_environment() -> tuple[str, ...]:
    """$GPUPLEX_DCGM_URLS: dcgm-exporter URLs, comma-separated (blanks around them ignored)."""
    raw = os.environ.get(DCGM_URLS_VARIABLE, "")
    return tuple(url.strip() for url in raw.split(",") if url.strip())


def redis_url_from_environment() -> str | None:
    return os.environ.get("GPUPLEX_REDIS_URL")


METRICS_TOKEN_VARIABLE = "GPUPLEX_METRICS_TOKEN"  # noqa: S105 - a variable's name, not a secret


def take_metrics_token() -> str | None:
    """$GPUPLEX_METRICS_TOKEN, removed from this process's environment as it is read: the caller
    keeps only its hash, and the processes it starts do not inherit the token."""
    return os.environ.pop(METRICS_TOKEN_VARIABLE, None) or None


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """What a gateway worker needs besides the spec's `gateway:` section."""

    spec_path: Path | None  # follow this spec file; None: the store's applied revision
    store_url: str
    spool_dir: Path
    redis_url: str | None = None
    #: SHA-256 of the token that reads /metrics (never the token itself); None: no token reads it
    metrics_token_sha256: str | None = None

    def to_environment(self) -> dict[str, str]:
        data = {
            "spec_path": str(self.spec_path) if self.spec_path is not None else "",
            "store_url": self.store_url,
            "spool_dir": str(self.spool_dir),
            "redis_url": self.redis_url or "",
            "metrics_token_sha256": self.metrics_token_sha256 or "",
        }
        return {GATEWAY_SETTINGS_VARIABLE: json.dumps(data)}


GATEWAY_SETTINGS_VARIABLE = "GPUPLEX_GATEWAY_SETTINGS"


def gateway_settings_from_environment() -> GatewaySettings:
    """A worker's settings, as the `gpuplex gateway` process that started it exported them."""
    raw = os.environ.get(GATEWAY_SETTINGS_VARIABLE)
    if not raw:
        raise GatewayError(f"{GATEWAY_SETTINGS_VARIABLE} is not set: start with `gpuplex gateway`")
    data = json.loads(raw)
    return GatewaySettings(
        spec_path=Path(data["spec_path"]) if data["spec_path"] else None,
        store_url=data["store_url"],
        spool_dir=Path(data["spool_dir"]),
        redis_url=data["redis_url"] or None,
        metrics_token_sha256=data.get("metrics_token_sha256") or None,
    )


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What `gpuplex server` (and `gpuplex up`) runs with."""

    store_url: str
    listen_host: str = "127.0.0.1"
    listen_port: int = 8090  # the gateway has 8080
    spec_path: Path | None = None  # applied as a new revision at start when it changed
    rollup_interval_s: float = 60.0  # how often usage is rolled up and budgets checked
    budget_webhook_timeout_s: float = 5.0
    #: networks that read /metrics without a token (default none: every reader needs the metrics
    #: token or a platform-admin token)
    metrics_from: tuple[str, ...] = ()
    #: SHA-256 of the metrics token ($GPUPLEX_METRICS_TOKEN); None: only platform-admin tokens
    metrics_token_sha256: str | None = None
    #: dcgm-exporter /metrics URLs read for GPU samples on Kubernetes; none: no DCGM reading
    dcgm_urls: tuple[str, ...] = ()
    dcgm_interval_s: float = 15.0  # how often they are read
    #: raw GPU samples are deleted once rolled up and older than this (server/sample_retention.py)
    sample_retention_days: float = 7.0
    #: how often the job runner admits, places and moves on jobs (server/job_runner.py)
    jobs_interval_s: float = 2.0


@dataclass(frozen=True, slots=True)
class UpSettings:
    """What `gpuplex up` runs with."""

    spec_path: Path
    state_dir: Path
    driver: str = "auto"  # auto | nvml | sim
    server_host: str = "127.0.0.1"
    server_port: int = 8090
    sample_interval_s: float = 5.0
    rollup_interval_s: float = 15.0
    check: bool = False  # start, send one request through the gateway, stop
    #: on simulated GPUs: every workload runs its own command (a real model server), no stand-in
    real_commands: bool = False
    #: on simulated GPUs: these workloads (`tenant/workload`) run their own commands
    real: tuple[str, ...] = ()
