"""A `threading.Event` that a signal handler may set.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread is:
also inside `Event.wait` while it holds the lock that `Event.set` takes. A handler that calls
`set()` there waits for itself forever (`gpuplex up` hung so after a Ctrl-C at start-up, once in
a full test run; the gateway's usage mover could hang the same way on SIGTERM). So the handler here takes no lock: it notes the signal in a plain attribute and
writes a byte to a pipe, and a thread of its own reads the pipe and sets the event, from outside
the main thread's critical sections.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable
from types import FrameType


class SignalEvent:
    """`event` is set soon after one of the signals `catch` was given arrives; `requested` is
    True from the moment the handler ran (for checks in the main thread that must not miss it)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.requested = False
        self._read_end, self._write_end = os.pipe()  # not inherited by children (PEP 446)
        os.set_blocking(self._write_end, False)
        self._relay = threading.Thread(target=self._set_on_write, name="signal-event", daemon=True)
        self._relay.start()

    def catch(self, signals: Iterable[signal.Signals]) -> SignalEvent:
        """Handle `signals` from now on (call from the main thread)."""
        for sig in signals:
            signal.signal(sig, self.handle)
        return self

    def is_set(self) -> bool:
        return self.requested or self.event.is_set()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: no lock taken, nothing that can block."""
        self.requested = True
        with contextlib.suppress(BlockingIOError):  # full of earlier signals: it is being set
            os.write(self._write_end, b"\0")

    def _set_on_write(self) -> None:
        while os.read(self._read_end, 1):
            self.event.set()
