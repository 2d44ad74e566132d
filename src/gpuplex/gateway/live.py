"""What a gateway worker serves by, taken from the applied revision, and how it follows a newer one.

`LiveConfig` is one immutable bundle: the spec's `gateway:` settings, the routing table (tenants'
weights, priorities and rate limits, models, routes) and a pool per backend. A request reads
`runtime.live` once when it arrives and keeps that bundle to its end, so a revision applied while it
runs never changes what it was admitted by, nor pulls its backend from under it. A newer revision
builds a new bundle, keeping every pool whose backend and settings did not change (its queue,
health and breaker state go on), and swaps it in whole.

The source is the store's applied revision (what `gpuplex up` and the control plane use) or, for a
gateway run beside no control plane, a spec file, re-read when it changes. A revision that cannot be
read or parsed is logged and the worker keeps serving the one it has.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuplex.core.serve.routes import RouteTable, route_table
from gpuplex.core.spec import GpuplexSpec
from gpuplex.core.spec.auth import OidcSpec
from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.errors import GatewayError
from gpuplex.gateway.backends import BackendPool
from gpuplex.revision import AppliedRevisions
from gpuplex.specfile import load_spec_text

log = logging.getLogger(__name__)

#: `gateway:` settings a running gateway cannot take from a new revision: they shape its
#: processes, its listening socket, its upstream client or how long a limiter lease lasts. A change
#: is logged and the value it started with stays in force; a restart takes it.
RESTART_ONLY = (
    "host",
    "port",
    "workers",
    "limiter",
    "max_connections",
    "max_connections_per_client",
    "max_request_line_kib",
    "max_header_kib",
    "max_headers",
    "header_timeout_s",
    "keep_alive_timeout_s",
    "upstream_timeout_s",
    "connect_timeout_s",
    "max_wait_s",
    "body_timeout_s",
    "failed_auth_per_min",
    "health_interval_s",
)

#: The settings a BackendPool is built with: a change builds new pools.
POOL_SETTINGS = (
    "breaker_failures",
    "breaker_open_s",
    "max_in_flight_per_backend",
    "max_waiting_per_tenant",
    "max_wait_s",
)

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class LiveConfig:
    source_version: str  # "revision 7", or "sha256 ab12..." of the spec file
    config: GatewaySpec
    routes: RouteTable
    pools: Mapping[str, BackendPool]
    metrics_networks: tuple[IpNetwork, ...]  # who may read /metrics without the token
    #: whose service accounts' tokens are taken (auth.oidc with `gateway:`); None: API keys only
    oidc: OidcSpec | None = None


def live_config(
    version: str, spec: GpuplexSpec, started: GatewaySpec, previous: LiveConfig | None = None
) -> LiveConfig:
    """The bundle for `spec`, with the RESTART_ONLY settings the process `started` with; pools of
    `previous` whose backend and settings are unchanged go on."""
    config = spec.gateway.model_copy(update={k: getattr(started, k) for k in RESTART_ONLY})
    workers = started.workers
    routes = route_table(spec, config.backend_host, config.backends)
    reusable = (
        previous.pools
        if previous is not None and _pool_settings(previous.config) == _pool_settings(config)
        else {}
    )
    pools = {}
    for backend_id, backend in routes.backends.items():
        kept = reusable.get(backend_id)
        if kept is None or kept.backend != backend:
            kept = BackendPool(backend, config, workers)
        pools[backend_id] = kept
    networks = tuple(ipaddress.ip_network(net, strict=False) for net in config.metrics_from)
    oidc = spec.auth.oidc if spec.auth.oidc is not None and spec.auth.oidc.gateway else None
    return LiveConfig(version, config, routes, pools, networks, oidc)


def _pool_settings(config: GatewaySpec) -> tuple[object, ...]:
    """What a BackendPool is built from besides its backend."""
    return tuple(getattr(config, name) for name in POOL_SETTINGS)


def restart_only_changes(running: GatewaySpec, wanted: GatewaySpec) -> list[str]:
    return [name for name in RESTART_ONLY if getattr(running, name) != getattr(wanted, name)]


class SpecSource(Protocol):
    def newest(self) -> tuple[str, GpuplexSpec] | None:
        """(version, spec) of what to serve now; None when there is nothing yet. Blocking.
        Raises GpuplexError when it cannot be read."""


class StoreRevisionSource:
    """The applied revision in the store: polled with one indexed query, parsed once per revision."""

    def __init__(self, revisions: AppliedRevisions) -> None:
        self._revisions = revisions

    def newest(self) -> tuple[str, GpuplexSpec] | None:
        applied = self._revisions.get()
        return None if applied is None else (f"revision {applied.revision}", applied.spec)


class SpecFileSource:
    """A spec file, read again when its size, time or inode changed, parsed when its bytes did."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stat: tuple[int, int, int] | None = None
        self._seen: tuple[str, GpuplexSpec] | None = None

    def newest(self) -> tuple[str, GpuplexSpec] | None:
        try:
            info = os.stat(self.path)
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if stamp == self._stat and self._seen is not None:
                return self._seen
            data = self.path.read_bytes()
        except OSError as error:
            raise GatewayError(f"{self.path}: cannot read it ({error.strerror})") from None
        version = "sha256 " + hashlib.sha256(data).hexdigest()[:12]
        if self._seen is None or self._seen[0] != version:
            text = data.decode("utf-8", errors="replace")
            self._seen = (version, load_spec_text(text, source=str(self.path)))
        self._stat = stamp
        return self._seen
