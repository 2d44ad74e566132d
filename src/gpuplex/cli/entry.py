"""The `gpuplex` command's entry point. Ctrl-C at any moment, even while the program is still
loading its libraries, ends it quietly with status 130 instead of a Python traceback.

A Ctrl-C that lands inside an import is held until the import is done, then raised: an interrupt
raised inside a library's import can come out as that library's own error (pydantic, building a
model's validators, reports it as a `SchemaError`), or end Python with no message at all (seen
while pydantic_core loaded). Each command imports what it runs when it runs, so imports happen
well after start-up too (typer's own pydantic, a command's modules): the hold covers them all.
A command that installs its own SIGINT handler (`gpuplex up`: a flag its start-up checks) gets a
Ctrl-C still held at that moment through that handler."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

#: The shell's status for a program ended by SIGINT.
EXIT_INTERRUPTED = 130
#: How often a held Ctrl-C checks whether the import it landed in is done.
HELD_CHECK_S = 0.01


def _inside_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


class CtrlC:
    """SIGINT raises KeyboardInterrupt where the program is, unless that is inside an import:
    then it is held and checked again every HELD_CHECK_S (SIGALRM) until the import is done."""

    def __init__(self) -> None:
        self.held = False

    def install(self) -> None:
        signal.signal(signal.SIGALRM, self._check_held)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if _inside_import(frame):
            self.held = True
            signal.setitimer(signal.ITIMER_REAL, HELD_CHECK_S)
            return
        raise KeyboardInterrupt

    def _check_held(self, signum: int, frame: FrameType | None) -> None:
        if not self.held:
            return
        if signal.getsignal(signal.SIGINT) != self._on_sigint:
            self.held = False  # the command handles SIGINT itself now: it gets this one
            signal.raise_signal(signal.SIGINT)
            return
        if _inside_import(frame):
            signal.setitimer(signal.ITIMER_REAL, HELD_CHECK_S)
            return
        self.held = False
        raise KeyboardInterrupt


def main() -> None:
    CtrlC().install()
    try:
        from gpuplex.cli.main import run  # inside the try: a Ctrl-C while it loads

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
