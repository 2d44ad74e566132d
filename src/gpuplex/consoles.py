"""The consoles of gpuplex's commands. On a terminal rich fits tables to its width. Piped (`| cat`, `> file`, a CI
log) rich would assume 80 columns and cut table cells short (`ded…`); there a console is as wide
as gpuplex's widest table needs, unless $COLUMNS says otherwise."""

from __future__ import annotations

import sys

from rich.console import Console

from gpuplex.settings import environment_value

#: Columns when the output is not a terminal and $COLUMNS is not set.
PIPED_WIDTH = 240


def stdout_console() -> Console:
    return _console(stderr=False)


def stderr_console() -> Console:
    return _console(stderr=True)


def _console(*, stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    piped = not (hasattr(stream, "isatty") and stream.isatty())
    columns_set = (environment_value("COLUMNS") or "").isdigit()
    width = PIPED_WIDTH if piped and not columns_set else None
    return Console(stderr=stderr, width=width)
