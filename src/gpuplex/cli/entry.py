"""The `gpuplex` command's entry point. Ctrl-C at any moment, even while the program is still
loading its libraries, ends it quietly with status 130 instead of a Python traceback."""

from __future__ import annotations

import os
import sys

#: The shell's status for a program ended by SIGINT.
EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        from gpuplex.cli.main import run  # the libraries load here, inside the try

        run()
    except KeyboardInterrupt:
        # Everything the interrupted code opened has been closed on the way out here. os._exit:
        # the status must be 130 (Python ends a run whose KeyboardInterrupt was seen by killing
        # itself with SIGINT in some paths, and then the shell sees "killed", not "stopped").
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_INTERRUPTED)
