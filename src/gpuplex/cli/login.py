"""`gpuplex login`: sign in with the company's identity provider on this terminal (the device
flow, gpuplex.cli.device_flow); later commands that call the control plane use that token."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gpuplex.cli.conventions import reported
from gpuplex.cli.device_flow import Login, endpoints, save, start, wait_for_token
from gpuplex.clock import now_s
from gpuplex.consoles import stderr_console

err = stderr_console()


def login_command(
    issuer: Annotated[
        str,
        typer.Option(
            envvar="GPUPLEX_OIDC_ISSUER",
            help="The identity provider (the spec's auth.oidc.issuer).",
        ),
    ],
    client_id: Annotated[
        str,
        typer.Option(
            envvar="GPUPLEX_OIDC_CLIENT_ID",
            help="The provider's public client for the device flow (no secret).",
        ),
    ],
    audience: Annotated[
        str | None,
        typer.Option(
            envvar="GPUPLEX_OIDC_AUDIENCE",
            help="Ask for a token for this audience (RFC 8707 resource), where the provider "
            "issues tokens per API.",
            show_default=False,
        ),
    ] = None,
    scope: Annotated[
        list[str] | None,
        typer.Option(help="A scope to ask for (repeat); default: openid profile email groups."),
    ] = None,
) -> None:
    """Sign in with the identity provider (device flow); the token is kept for this user."""
    with reported():
        device_endpoint, token_endpoint = endpoints(issuer)
        code = start(
            device_endpoint, client_id, scope or ["openid", "profile", "email", "groups"], audience
        )
        where = code.verification_uri_complete or code.verification_uri
        err.print(
            f"open [bold]{escape(where)}[/] and enter the code [bold]{escape(code.user_code)}[/]"
        )
        err.print(f"user code: {code.user_code}", highlight=False, markup=False)
        with err.status("waiting for you to sign in ..."):
            answer = wait_for_token(token_endpoint, client_id, code)
        expires = now_s() + float(answer.get("expires_in", 3600))
        path = save(Login(issuer, str(answer["access_token"]), expires))
        err.print(f"signed in; the token is kept in {escape(str(path))} until it expires")
