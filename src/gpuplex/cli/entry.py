"""The `gpuplex` command's entry point. Ctrl-C at any moment, even while the program is still
loading its libraries, ends it quietly with status 130 instead of a Python traceback.

While the libraries load, Ctrl-C is only noted, and acted on once they have loaded: an interrupt
raised inside a library's import can come out as that library's own error (pydantic, building a
model's validators, reports it as a `SchemaError`), which no `except KeyboardInterrupt` sees."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

#: The shell's status for a program ended by SIGINT.
EXIT_INTERRUPTED = 130


def main() -> None:
    interrupted: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        interrupted.append(signum)

    previous = signal.signal(signal.SIGINT, note)
    try:
        from gpuplex.cli.main import run  # the libraries load here, Ctrl-C only noted
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        if interrupted:
            raise KeyboardInterrupt
        run()
    except KeyboardInterrupt:
        _interrupted()


def _interrupted() -> None:
    # Everything the interrupted code opened has been closed on the way out here. os._exit: the
    # status must be 130 (Python ends a run whose KeyboardInterrupt was seen by killing itself
    # with SIGINT in some paths, and then the shell sees "killed", not "stopped").
    sys.stderr.write("interrupted\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(EXIT_INTERRUPTED)
