"""The options of a command that calls the running control plane: where it is (`--server`, else
$GPUPLEX_SERVER_URL, else `gpuplex up`'s address) and with which bearer token (`--token`, else
$GPUPLEX_TOKEN; without either, gpuplex.client.control_plane uses the token `gpuplex login`
kept)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuplex.settings import DEFAULT_SERVER_URL, SERVER_URL_VARIABLE, TOKEN_VARIABLE

ServerOption = Annotated[
    str,
    typer.Option(
        "--server",
        envvar=SERVER_URL_VARIABLE,
        help="The control plane's URL (`gpuplex up` prints it).",
        show_default=f"${SERVER_URL_VARIABLE}, else {DEFAULT_SERVER_URL}",
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=TOKEN_VARIABLE,
        help="A bearer token of the control plane (`gpuplex up` prints the admin token; "
        "`gpuplex token create` makes one).",
        show_default=f"${TOKEN_VARIABLE}",
    ),
]
