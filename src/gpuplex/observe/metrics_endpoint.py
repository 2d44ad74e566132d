"""`/metrics` on the control plane, for the operator's Prometheus. It names every tenant, so it is not
public: a caller from one of the allowed networks (default loopback only, `gpuplex server
--metrics-from`) reads it without a token, like the gateway's /metrics; anyone else needs a
platform-admin token (`Authorization: Bearer gpt_...`, what Prometheus's `authorization` sends).
Behind a reverse proxy every caller has the proxy's address: allow the proxy's network only if the
proxy itself restricts /metrics, or use the token."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from fastapi import FastAPI, Request, Response

from gpuplex.core.access import Action, Principal, Role
from gpuplex.observe.server_metrics import exposition, metrics_registry
from gpuplex.observe.tenant_labels import TENANT_LABEL_CAP
from gpuplex.server.auth import require
from gpuplex.server.context import ServerContext
from gpuplex.server.problems import UNAUTHENTICATED, ApiProblem

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: The classic text format every Prometheus reads (the gateway's /metrics sends the same).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Who reads /metrics without a token unless configured otherwise.
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")


def parse_networks(texts: Sequence[str]) -> tuple[Network, ...]:
    """`10.0.0.0/8`, `192.168.1.7` (one address) or `::1/128`; ValueError names a bad entry."""
    networks = []
    for text in texts:
        try:
            networks.append(ipaddress.ip_network(text.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not a network like 10.0.0.0/8 or an address") from None
    return tuple(networks)


def mount_metrics(
    app: FastAPI,
    ctx: ServerContext,
    metrics_from: Sequence[str] = LOOPBACK_NETWORKS,
    tenant_cap: int = TENANT_LABEL_CAP,
) -> None:
    """Add `GET /metrics` (outside /api/v1 and the OpenAPI schema) to `app`."""
    networks = parse_networks(metrics_from)
    registry = metrics_registry(ctx, tenant_cap)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        if not _from_allowed_network(request, networks):
            _require_platform_token(request, ctx)
        return Response(exposition(registry), media_type=CONTENT_TYPE)


def _from_allowed_network(request: Request, networks: Sequence[Network]) -> bool:
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:  # a test client's or a Unix socket's non-address
        return False
    return any(address in network for network in networks)


def _require_platform_token(request: Request, ctx: ServerContext) -> None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise ApiProblem(
            UNAUTHENTICATED,
            "/metrics is served to the allowed networks (gpuplex server --metrics-from) or with "
            "`Authorization: Bearer <platform-admin token>`",
        )
    identity = ctx.tokens.authenticate(credentials.strip(), ctx.now())
    if identity is None:
        raise ApiProblem(UNAUTHENTICATED, "the token is unknown, revoked or expired")
    principal = Principal(name=identity.name, role=Role(identity.role), tenant=identity.tenant)
    require(principal, Action.FLEET_READ)
