"""`gpuplex up [FILE]`: the whole system on this server, in one command."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuplex.consoles import stdout_console
from gpuplex.settings import UpSettings, gpuplex_home

out = stdout_console()


def up_command(
    file: Annotated[
        Path, typer.Argument(help="The gpuplex.yaml to run.", show_default=True)
    ] = Path("gpuplex.yaml"),
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="This instance's home: its store, logs and host state.",
            show_default="$GPUPLEX_HOME, else /var/lib/gpuplex as root, else ~/.local/state/gpuplex",
        ),
    ] = None,
    driver: Annotated[
        str, typer.Option(help="auto: real GPUs when NVML finds any, else simulated; nvml; sim.")
    ] = "auto",
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="Port of the control plane and dashboard.")
    ] = 8090,
    check: Annotated[
        bool,
        typer.Option("--check", help="Start, send one request through the gateway, then stop."),
    ] = False,
    real_commands: Annotated[
        bool,
        typer.Option(
            "--real-commands",
            help="On simulated GPUs, run every workload's own command (a real model server, "
            "e.g. vLLM on CPU) instead of a simulated stand-in.",
        ),
    ] = False,
    real: Annotated[
        list[str] | None,
        typer.Option(
            "--real",
            metavar="TENANT/WORKLOAD",
            help="On simulated GPUs, run this workload's own command; the others get stand-ins. "
            "Repeat for several.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the control plane, the gateway and the host runtime for FILE's tenants, in one command.

    Runs on the real GPUs if NVML finds any, else on simulated GPUs with simulated model servers
    (stand-ins for the spec's commands), unless --real-commands or --real says to run the spec's
    own. Prints what runs for real and what is a stand-in, the dashboard link, demo API keys, an
    `openai` client example and the GPUPLEX_HOME line that points the other commands at this
    instance; Ctrl-C stops everything."""
    from gpuplex.up.lifecycle import StopSignals

    if driver not in ("auto", "nvml", "sim"):
        raise typer.BadParameter("use auto, nvml or sim", param_hint="--driver")
    if real_commands and real:
        raise typer.BadParameter(
            "--real-commands runs every command for real already: give it or --real, not both",
            param_hint="--real",
        )
    # From here a Ctrl-C only sets a flag that start-up checks (never a half-done import or step)
    stop = StopSignals().catch()
    from gpuplex.up.run import run_up  # the server's libraries only for this command

    stop.checkpoint()
    run_up(
        stop,
        UpSettings(
            spec_path=file,
            state_dir=gpuplex_home(state_dir).root,
            driver=driver,
            server_port=port,
            check=check,
            real_commands=real_commands,
            real=tuple(real or ()),
        ),
        out,
    )
