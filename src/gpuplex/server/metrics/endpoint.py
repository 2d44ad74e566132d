"""`/metrics` on the control plane, for the operator's Prometheus. It names every tenant, so it is not
public: a reader sends the metrics token ($GPUPLEX_METRICS_TOKEN, the gateway's too) or a
platform-admin token (`Authorization: Bearer ...`, what Prometheus's `authorization` sends). Callers
from a network listed with `gpuplex server --metrics-from` read it without a token; none is listed
by default, not even loopback, since tenant workloads may share the host's network. Behind a
reverse proxy every caller has the proxy's address: list the proxy's network only if the proxy
itself restricts /metrics, or use a token."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from fastapi import FastAPI, Request, Response

from gpuplex.clock import Clock
from gpuplex.core.access import Permission, Principal, Role
from gpuplex.core.serve.keys import bearer_token
from gpuplex.observe.metrics_token import presents_metrics_token
from gpuplex.server.auth import require
from gpuplex.server.context import ServerContext
from gpuplex.server.metrics.collector import exposition, metrics_registry
from gpuplex.server.metrics.tenant_labels import TENANT_LABEL_CAP
from gpuplex.server.problems import UNAUTHENTICATED, ApiProblem
from gpuplex.store.tokens import TokenRepository

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: The classic text format every Prometheus reads (the gateway's /metrics sends the same).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: What `--metrics-from` lists to let local readers in without a token (not the default).
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
    metrics_from: Sequence[str] = (),
    tenant_cap: int = TENANT_LABEL_CAP,
    metrics_token_sha256: str | None = None,
) -> None:
    """Add `GET /metrics` (outside /api/v1 and the OpenAPI schema) to `app`."""
    networks = parse_networks(metrics_from)
    registry = metrics_registry(ctx, tenant_cap)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        authorization = request.headers.get("authorization")
        if authorization is None:
            if not _from_allowed_network(request, networks):
                raise ApiProblem(UNAUTHENTICATED, _HOW_TO_READ)
        elif not presents_metrics_token(authorization, metrics_token_sha256):
            _require_platform_token(authorization, ctx.tokens, ctx.clock)
        return Response(exposition(registry), media_type=CONTENT_TYPE)


def _from_allowed_network(request: Request, networks: Sequence[Network]) -> bool:
    if request.client is None:
        return False
    try:
        address = ipaddress.ip_address(request.client.host)
    except ValueError:  # a test client's or a Unix socket's non-address
        return False
    return any(address in network for network in networks)


_HOW_TO_READ = (
    "/metrics names every tenant: send `Authorization: Bearer <token>` with the metrics token "
    "($GPUPLEX_METRICS_TOKEN) or a platform-admin token, or scrape from a network listed with "
    "`gpuplex server --metrics-from`"
)


def _require_platform_token(authorization: str, tokens: TokenRepository, clock: Clock) -> None:
    credentials = bearer_token(authorization)
    if credentials is None:
        raise ApiProblem(UNAUTHENTICATED, _HOW_TO_READ)
    identity = tokens.authenticate(credentials, clock.utc_now())
    if identity is None:
        raise ApiProblem(
            UNAUTHENTICATED,
            "the token is not the metrics token, nor a known, unrevoked, unexpired token",
        )
    principal = Principal(name=identity.name, role=Role(identity.role), tenant=identity.tenant)
    require(principal, Permission.FLEET_READ)
