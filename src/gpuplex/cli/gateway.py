"""`gpuplex gateway`: the OpenAI-compatible gateway for the applied spec's tenants (the store's
newest revision, or a spec file given with --config), following each new one live."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuplex.cli.conventions import StoreOption
from gpuplex.consoles import stderr_console
from gpuplex.core.plural import counted
from gpuplex.errors import GatewayError
from gpuplex.gateway.http_servers import HttpServer
from gpuplex.settings import (
    METRICS_TOKEN_VARIABLE,
    GatewaySettings,
    default_store_url,
    gpuplex_home,
    redis_url_from_environment,
    take_metrics_token,
)

if TYPE_CHECKING:
    from gpuplex.core.spec import GpuplexSpec

err = stderr_console()


def gateway_command(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="Serve by this gpuplex.yaml (tenants, models, gateway:), re-read when it changes. "
            "Without it: the spec applied in the store, following each new revision.",
            show_default=False,
        ),
    ] = None,
    store: StoreOption = None,
    redis_url: Annotated[
        str | None,
        typer.Option(help="Redis for shared rate limits (default: $GPUPLEX_REDIS_URL)."),
    ] = None,
    spool_dir: Annotated[
        Path | None,
        typer.Option(help="Durable usage spool.", show_default="$GPUPLEX_HOME/gateway/spool"),
    ] = None,
    server: Annotated[
        HttpServer,
        typer.Option(
            help=(
                "HTTP server: uvicorn (measured fastest here, and the only one with gpuplex's "
                "connection caps and idle timeouts) or granian (for comparison; not for "
                "untrusted clients)."
            )
        ),
    ] = HttpServer.UVICORN,
) -> None:
    """Serve the OpenAI-compatible API: keys, rate limits, fair queues, routing, metering.

    /metrics needs the bearer token in $GPUPLEX_METRICS_TOKEN (the process keeps only its hash)."""
    from gpuplex.core.spec.gateway import LimiterBackend
    from gpuplex.gateway.serve import serve
    from gpuplex.up.lifecycle import exit_with_parent

    exit_with_parent()  # under `gpuplex up`: stop when up dies, even by kill -9
    if os.geteuid() == 0:
        raise GatewayError(
            "the gateway never runs as root: start it as an unprivileged user "
            "(it needs no privileges; the host runtime is what runs as root)"
        )
    metrics_token = take_metrics_token()
    settings = GatewaySettings(
        spec_path=config.resolve() if config is not None else None,
        store_url=store or default_store_url(),
        spool_dir=(spool_dir or gpuplex_home().spool_dir).resolve(),
        redis_url=redis_url or redis_url_from_environment(),
        metrics_token_sha256=_metrics_token_sha256(metrics_token),
    )
    spec, source = _spec_to_serve(config, settings.store_url)  # fails here, not in each worker
    if spec.gateway.limiter is LimiterBackend.REDIS and not settings.redis_url:
        raise GatewayError(
            f"{source}: gateway.limiter is redis but no Redis URL was given: "
            "pass --redis-url or set GPUPLEX_REDIS_URL"
        )
    settings.spool_dir.mkdir(parents=True, exist_ok=True)
    gw = spec.gateway
    err.print(
        f"gateway on http://{gw.host}:{gw.port} with {counted(gw.workers, 'worker')}, "
        f"{counted(len(spec.tenants), 'tenant')}, limits in {gw.limiter}"
    )
    if settings.metrics_token_sha256 is None and not gw.metrics_from:
        err.print(
            f"note: /metrics answers nobody: set {METRICS_TOKEN_VARIABLE} for the scraper's "
            "bearer token (or list its network in gateway.metrics_from)",
            soft_wrap=True,
        )
    serve(settings, gw, server)


def _spec_to_serve(config: Path | None, store_url: str) -> tuple[GpuplexSpec, str]:
    """The spec the workers will start with, and where it comes from (for messages)."""
    from gpuplex.revision import AppliedRevisions  # SQLAlchemy only for this command
    from gpuplex.specfile import load_spec_file
    from gpuplex.store.db import open_store, safe_url
    from gpuplex.store.spec_revisions import SpecRevisions

    engine = open_store(store_url)
    try:
        if config is not None:
            return load_spec_file(config), str(config)
        applied = AppliedRevisions(SpecRevisions(engine)).get()
    finally:
        engine.dispose()
    if applied is None:
        raise GatewayError(
            f"no spec is applied in the store {safe_url(store_url)} yet: apply one (gpuplex "
            "server --spec FILE, or POST /api/v1/spec/apply), or give --config FILE"
        )
    return applied.spec, f"revision {applied.revision}"


def _metrics_token_sha256(token: str | None) -> str | None:
    if token is None:
        return None
    from gpuplex.observe.metrics_token import metrics_token_sha256

    try:
        return metrics_token_sha256(token)
    except ValueError as error:
        raise GatewayError(f"{METRICS_TOKEN_VARIABLE}: {error}") from None
