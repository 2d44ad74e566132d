"""`gpuplex server`: the control plane (REST API, dashboard, /metrics, roll-ups); and
`gpuplex token`: control-plane tokens for people and automation.

SQLAlchemy, FastAPI and uvicorn are imported inside the commands: every other `gpuplex` command
starts without them."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import (
    StoreOption,
    opened_store,
    os_user_name,
    parse_duration,
    reported,
)
from gpuplex.cli.help_pages import command_group
from gpuplex.clock import utc_now
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.core.access import Role
from gpuplex.settings import (
    DCGM_URLS_VARIABLE,
    METRICS_TOKEN_VARIABLE,
    ServerSettings,
    dcgm_urls_from_environment,
    default_store_url,
    take_metrics_token,
)

if TYPE_CHECKING:
    from gpuplex.store.tokens import ApiToken, TokenRepository

out = stdout_console()
err = stderr_console()
token_app = command_group(
    "Control-plane tokens: who may use the REST API and dashboard, with which role."
)


class TokenOutput(StrEnum):
    TABLE = "table"
    JSON = "json"


def server_command(
    spec: Annotated[
        Path | None, typer.Option(help="A gpuplex.yaml to apply at start (a new revision).")
    ] = None,
    store: StoreOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8090,
    rollup_interval_s: Annotated[
        float, typer.Option(min=1.0, help="Seconds between usage roll-ups and budget checks.")
    ] = 60.0,
    metrics_from: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CIDR",
            help="A network that reads /metrics without a token (repeat; default none, not even "
            f"loopback); others need ${METRICS_TOKEN_VARIABLE}'s token or a platform-admin token.",
        ),
    ] = None,
    dcgm_url: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="A dcgm-exporter /metrics URL to read GPU samples from on Kubernetes (repeat; "
            f"default ${DCGM_URLS_VARIABLE}, comma-separated). A host name with several "
            "addresses (a headless Service) is read at each.",
        ),
    ] = None,
    dcgm_interval_s: Annotated[
        float, typer.Option(min=1.0, help="Seconds between reads of the DCGM exporters.")
    ] = 15.0,
    sample_retention_days: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="Days raw GPU samples are kept once rolled up (roll-ups are kept for good).",
        ),
    ] = 7.0,
    jobs_interval_s: Annotated[
        float,
        typer.Option(
            min=0.1, help="Seconds between passes of the job runner (admit, place, move on)."
        ),
    ] = 2.0,
) -> None:
    """Run the control plane: REST API under /api/v1, the dashboard, /metrics."""
    from gpuplex.observe.metrics_token import metrics_token_sha256
    from gpuplex.server.dcgm_scrape import check_dcgm_url
    from gpuplex.server.metrics.endpoint import parse_networks
    from gpuplex.server.run import run_server

    try:
        parse_networks(metrics_from or [])
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint="--metrics-from") from None
    metrics_token = take_metrics_token()
    try:
        token_sha256 = metrics_token_sha256(metrics_token) if metrics_token else None
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=METRICS_TOKEN_VARIABLE) from None
    dcgm_urls = tuple(dcgm_url) if dcgm_url else dcgm_urls_from_environment()
    for url in dcgm_urls:
        try:
            check_dcgm_url(url)
        except ValueError as error:
            where = "--dcgm-url" if dcgm_url else DCGM_URLS_VARIABLE
            raise typer.BadParameter(str(error), param_hint=where) from None
    with reported():
        run_server(
            ServerSettings(
                store_url=store or default_store_url(),
                listen_host=host,
                listen_port=port,
                spec_path=spec,
                rollup_interval_s=rollup_interval_s,
                metrics_from=tuple(metrics_from or ()),
                metrics_token_sha256=token_sha256,
                dcgm_urls=dcgm_urls,
                dcgm_interval_s=dcgm_interval_s,
                sample_retention_days=sample_retention_days,
                jobs_interval_s=jobs_interval_s,
            )
        )


@contextmanager
def _tokens(store: str | None, *, must_exist: bool = True) -> Iterator[TokenRepository]:
    from gpuplex.store.tokens import TokenRepository

    with opened_store(store, must_exist=must_exist) as engine:
        yield TokenRepository(engine)


@token_app.command("create")
def create_command(
    name: Annotated[str, typer.Option(help="Who or what uses the token.", show_default=False)],
    role: Annotated[Role, typer.Option(help="What the token may do.")] = Role.PLATFORM_ADMIN,
    tenant: Annotated[
        str | None, typer.Option(help="The tenant, for tenant-admin and tenant-viewer.")
    ] = None,
    expires_in: Annotated[
        str | None, typer.Option(help="Lifetime: 30d, 12h or 90m [default: never expires]")
    ] = None,
    store: StoreOption = None,
    output: Annotated[TokenOutput, typer.Option("--output", "-o")] = TokenOutput.TABLE,
) -> None:
    """Create a token and print it ONCE: only its hash is kept."""
    with reported():
        if (role is Role.PLATFORM_ADMIN) != (tenant is None):
            raise typer.BadParameter(
                "a platform-admin token has no tenant; tenant roles need one", param_hint="--tenant"
            )
        lifetime = parse_duration(expires_in) if expires_in is not None else None
        now = utc_now()
        with _tokens(store, must_exist=False) as tokens:
            secret, token = tokens.create(
                name=name,
                role=role.value,
                tenant=tenant,
                expires_at=now + lifetime if lifetime is not None else None,
                now=now,
                actor=os_user_name(),
            )
        if output is TokenOutput.JSON:
            sys.stdout.write(json.dumps({"token": secret, **_token_json(token)}, indent=2) + "\n")
            err.print("store this token now: it will not be shown again", highlight=False)
            return
        scope = f" for tenant {escape(tenant)}" if tenant else ""
        out.print(f"created {role.value} token [bold]{token.prefix}[/]{scope}", highlight=False)
        out.print(secret, markup=False, highlight=False, soft_wrap=True)
        out.print("[yellow]store this token now: it will not be shown again[/]", highlight=False)


@token_app.command("list")
def list_command(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's tokens.")] = None,
    store: StoreOption = None,
    output: Annotated[TokenOutput, typer.Option("--output", "-o")] = TokenOutput.TABLE,
) -> None:
    """Every token (never the secrets)."""
    with reported(), _tokens(store) as tokens:
        found = tokens.list(tenant=tenant)
    if output is TokenOutput.JSON:
        sys.stdout.write(json.dumps([_token_json(t) for t in found], indent=2) + "\n")
        return
    table = Table("prefix", "name", "role", "tenant", "created", "made by", "state")
    now = utc_now()
    for token in found:
        maker = token.made_by
        made_by = (maker.person or f"token {maker.token_prefix}") if maker is not None else "-"
        table.add_row(
            token.prefix,
            escape(token.name),
            token.role,
            escape(token.tenant or "-"),
            token.created_at.strftime("%Y-%m-%d %H:%M"),
            escape(made_by),
            token.state(now),
        )
    out.print(table)


@token_app.command("revoke")
def revoke_command(
    prefix: Annotated[str, typer.Argument(help="The token's prefix.", show_default=False)],
    store: StoreOption = None,
) -> None:
    """Revoke a token: it stops working at once."""
    with reported(), _tokens(store) as tokens:
        token = tokens.revoke(prefix, utc_now(), os_user_name())
    out.print(f"revoked token {token.prefix} ({escape(token.name)})", highlight=False)


def _token_json(token: ApiToken) -> dict[str, Any]:
    return {
        "prefix": token.prefix,
        "name": token.name,
        "role": token.role,
        "tenant": token.tenant,
        "created_at": token.created_at.isoformat(),
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
        "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
        "suspended_at": token.suspended_at.isoformat() if token.suspended_at else None,
        "state": token.state(utc_now()),
        "made_by": token.made_by.shown() if token.made_by is not None else None,
    }
