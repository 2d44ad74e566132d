"""Run the gateway's worker processes with the chosen HTTP server, and the usage mover beside them.
uvicorn (with uvloop and httptools) is the default: it measured fastest for this proxy on a 2-core
machine (bench/gateway.py, docs/benchmarks.md); granian stays available for comparison.

Only uvicorn gets the whole front door of gpuplex/http_guard.py (header size and count limits, the
header and keep-alive timeouts, the connection caps per client address and in all, HTTP/1.0
replies without chunking). granian gets what its settings offer: the header-read timeout and a
bound on the buffered head (at least 8 KiB); its own fixed limit of 100 headers; no connection
caps of any kind and no idle timeout between kept-alive requests. Use it for comparison, not facing
untrusted clients."""

from __future__ import annotations

from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.errors import GatewayError
from gpuplex.gateway.api_errors import error_body
from gpuplex.gateway.http_servers import HttpServer
from gpuplex.http_limits import HttpLimits, fitted_to_file_limit
from gpuplex.settings import GatewaySettings, export_for_workers

APP_FACTORY = "gpuplex.gateway.app:app_from_environment"
#: A proxied request holds the client's connection and one to a model server.
FDS_PER_CONNECTION = 2


def serve(settings: GatewaySettings, config: GatewaySpec, server: HttpServer) -> None:
    """Blocks until the server stops (SIGINT or SIGTERM)."""
    metrics_dir = settings.spool_dir.parent / "gateway-metrics"
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in metrics_dir.glob("*.db"):
        stale.unlink()  # metrics of an earlier run's workers
    exported = settings.to_environment()
    if config.workers > 1:
        exported["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    export_for_workers(exported)
    from gpuplex.gateway.mover_process import start_mover, stop_mover  # the store: not at import

    mover = start_mover(settings.spool_dir, settings.store_url)
    try:
        _run_server(config, server)
    finally:
        stop_mover(mover)


def http_limits(config: GatewaySpec) -> HttpLimits:
    """The front door's limits from the spec's `gateway:` settings."""
    return HttpLimits(
        max_request_line_bytes=config.max_request_line_kib * 1024,
        max_header_bytes=config.max_header_kib * 1024,
        max_headers=config.max_headers,
        header_timeout_s=float(config.header_timeout_s),
        keep_alive_timeout_s=config.keep_alive_timeout_s,
        max_connections=config.max_connections,
        max_connections_per_client=config.max_connections_per_client,
    )


def _run_server(config: GatewaySpec, server: HttpServer) -> None:
    limits = fitted_to_file_limit(http_limits(config), FDS_PER_CONNECTION)  # workers inherit it
    if server is HttpServer.UVICORN:
        import uvicorn

        from gpuplex.http_guard import uvicorn_options  # uvicorn: only where the gateway runs

        uvicorn.run(
            APP_FACTORY,
            factory=True,
            host=config.host,
            port=config.port,
            workers=config.workers,
            loop="uvloop",
            access_log=False,
            log_level="warning",
            proxy_headers=False,  # the client address is the peer's, never a header's claim
            server_header=False,
            date_header=False,
            **uvicorn_options(limits, error_body),
        )
        return
    try:
        from granian import Granian
        from granian.constants import HTTPModes, Interfaces, Loops
        from granian.http import HTTP1Settings
    except ImportError:
        raise GatewayError(
            "--server granian needs granian: pip install granian (or use the default, uvicorn)"
        ) from None

    Granian(
        APP_FACTORY,
        factory=True,
        address=config.host,
        port=config.port,
        interface=Interfaces.ASGI,
        workers=config.workers,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        http1_settings=HTTP1Settings(
            header_read_timeout=int(limits.header_timeout_s * 1000),
            max_buffer_size=max(8192, limits.max_header_bytes),
        ),
        log_access=False,
        respawn_failed_workers=True,
        backlog=2048,
    ).serve()
