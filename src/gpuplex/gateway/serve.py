"""Run the gateway's worker processes with the chosen HTTP server, and the usage mover beside them.
uvicorn (with uvloop and httptools) is the default: it measured fastest for this proxy on a 2-core
machine (bench/gateway.py, docs/benchmarks.md); granian stays available for comparison."""

from __future__ import annotations

from enum import StrEnum

from gpuplex.core.spec.gateway import GatewaySpec
from gpuplex.errors import GatewayError
from gpuplex.settings import GatewaySettings, export_for_workers

APP_FACTORY = "gpuplex.gateway.app:app_from_environment"


class HttpServer(StrEnum):
    GRANIAN = "granian"
    UVICORN = "uvicorn"


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


def _run_server(config: GatewaySpec, server: HttpServer) -> None:
    if server is HttpServer.UVICORN:
        import uvicorn

        uvicorn.run(
            APP_FACTORY,
            factory=True,
            host=config.host,
            port=config.port,
            workers=config.workers,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=30,
            proxy_headers=False,  # the client address is the peer's, never a header's claim
            server_header=False,
            date_header=False,
        )
        return
    try:
        from granian import Granian
        from granian.constants import HTTPModes, Interfaces, Loops
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
        log_access=False,
        respawn_failed_workers=True,
        backlog=2048,
    ).serve()
