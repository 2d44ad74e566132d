"""The `gpuplex` command's entry point. Ctrl-C at any moment, even while the program is still
loading its libraries, ends it quietly with status 130 instead of a Python traceback."""

from __future__ import annotations

import sys

#: The shell's status for a program ended by SIGINT.
EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        from gpuplex.cli.main import run  # the libraries load here, inside the try

        run()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
