"""The control plane's ASGI app: the REST API under /api/v1 (OpenAPI at /api/v1/openapi.json),
the dashboard's static files under /dashboard/ and its sign-in under /auth/, /metrics and
/healthz."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from gpuplex import __version__
from gpuplex.server import sign_in
from gpuplex.server.body_guard import BodyGuard, active_token_check, live_session_check
from gpuplex.server.context import ServerContext
from gpuplex.server.metrics.endpoint import mount_metrics
from gpuplex.server.problems import install_handlers
from gpuplex.server.routes import (
    audit,
    budgets,
    jobs,
    key_budgets,
    keys,
    latency,
    nodes,
    queues,
    spec,
    tenants,
    tokens,
    usage,
)

API_PREFIX = "/api/v1"
DASHBOARD_DIR = Path(__file__).parent / "dashboard"


def create_app(
    context: ServerContext,
    metrics_from: Sequence[str] = (),
    metrics_token_sha256: str | None = None,
) -> FastAPI:
    """`metrics_from`: networks that read /metrics without a token; `metrics_token_sha256`: the
    hash of the metrics token (see `gpuplex.server.metrics.endpoint`)."""
    app = FastAPI(
        title="gpuplex control plane",
        version=__version__,
        description=(
            "Tenants, spec and plan, keys and tokens, usage, chargeback statements, budgets, "
            "audit log and the GPU map. Authenticate with `Authorization: Bearer <token>`."
        ),
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=f"{API_PREFIX}/docs",
        redoc_url=None,
    )
    app.state.context = context
    install_handlers(app)
    # bodies: the caller checked before one is read, each bounded while it is read
    app.add_middleware(
        BodyGuard,
        authenticate=active_token_check(context.oidc_identities, context.tokens, context.clock),
        known_session=live_session_check(context.web_sessions, context.clock),
        throttle=context.failure_throttle,
    )
    for module in (
        tenants,
        spec,
        keys,
        tokens,
        usage,
        latency,
        budgets,
        key_budgets,
        jobs,
        queues,
        audit,
        nodes,
    ):
        app.include_router(module.router, prefix=API_PREFIX)
    app.include_router(sign_in.router)  # /auth/...: the dashboard's sign-in

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    mount_metrics(app, context, metrics_from, metrics_token_sha256=metrics_token_sha256)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/dashboard/")

    if DASHBOARD_DIR.is_dir():
        app.mount("/dashboard", StaticFiles(directory=DASHBOARD_DIR, html=True), name="dashboard")
    return app
