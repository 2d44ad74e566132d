"""`gpuplex login`: sign in with the company's identity provider on this terminal (a person: the
device flow, gpuplex.client.oidc.device_flow), or as a service account (its client id and a secret
from an environment variable or a file: the client credentials grant,
gpuplex.client.oidc.client_credentials); later commands that call the control plane use that token
(gpuplex.client.oidc.saved_login). This module asks and shows; the flows are in gpuplex.client."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gpuplex.cli.conventions import reported
from gpuplex.client.oidc.client_credentials import ServiceAccountClient, token_for
from gpuplex.client.oidc.device_flow import endpoints, start, wait_for_token
from gpuplex.client.oidc.provider import discovery, refused
from gpuplex.client.oidc.saved_login import Login, save
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
            help="The provider's public client for the device flow (no secret), or the "
            "service account's client with --client-secret-env or --client-secret-file.",
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
        typer.Option(
            help="A scope to ask for (repeat); default: openid profile email groups for a "
            "person, none for a service account."
        ),
    ] = None,
    client_secret_env: Annotated[
        str | None,
        typer.Option(
            help="Sign in as a service account (client credentials) whose secret is in this "
            "environment variable; the token is renewed from it when it runs out.",
            show_default=False,
        ),
    ] = None,
    client_secret_file: Annotated[
        str | None,
        typer.Option(
            help="Sign in as a service account whose secret is in this file.", show_default=False
        ),
    ] = None,
) -> None:
    """Sign in with the identity provider (device flow, or a service account's client
    credentials); the token is kept for this user."""
    with reported():
        if client_secret_env is not None or client_secret_file is not None:
            token_endpoint = discovery(issuer).get("token_endpoint")
            if not isinstance(token_endpoint, str):
                raise refused(f"{issuer}: its discovery document names no token endpoint")
            account = ServiceAccountClient(
                client_id,
                token_endpoint,
                tuple(scope or ()),
                audience,
                client_secret_env,
                client_secret_file,
            )
            token, expires = token_for(account, now_s())
            path = save(Login(issuer, token, expires, account))
            err.print(
                f"signed in as service account {escape(client_id)}; the token is kept in "
                f"{escape(str(path))} and renewed from the secret when it runs out"
            )
            return
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
