"""A signal that lands while the main thread is inside `threading.Event.wait`, holding the lock
`Event.set` takes: SignalEvent's handler still returns and the event is set once the lock is free;
a handler that calls `Event.set` itself waits for itself forever (the hang `gpuplex up` had)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# Each run in a process of its own: signals, and the main thread holding the event's lock. The
# lock is held as `Event.wait` holds it (CPython's `Event._cond`); the handler runs at the next
# call of a Python function, inside it.
SIGNAL_INSIDE_WAIT = """
import os, signal, threading
from gpuplex.signal_event import SignalEvent

def step():
    return None

{make_stop}
with event._cond:
    os.kill(os.getpid(), signal.SIGUSR1)
    step()
print("handler returned", flush=True)
print("event set" if event.wait(10) else "event never set", flush=True)
"""

SIGNAL_EVENT = """
stop = SignalEvent().catch([signal.SIGUSR1])
event = stop.event
"""

PLAIN_EVENT = """
event = threading.Event()
signal.signal(signal.SIGUSR1, lambda signum, frame: event.set())
"""


def run(make_stop: str, timeout_s: float) -> str:
    code = SIGNAL_INSIDE_WAIT.format(make_stop=textwrap.dedent(make_stop))
    done = subprocess.run(  # noqa: S603 - this interpreter, our own code
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s, check=True
    )
    return done.stdout


def test_a_signal_inside_the_events_wait_sets_it_once_the_lock_is_free() -> None:
    assert run(SIGNAL_EVENT, timeout_s=60).splitlines() == ["handler returned", "event set"]


def test_a_handler_that_sets_a_threading_event_itself_hangs_there() -> None:
    """What the test above guards against, on this Python: the plain handler never returns."""
    with pytest.raises(subprocess.TimeoutExpired):
        run(PLAIN_EVENT, timeout_s=5)


def test_requested_is_true_as_soon_as_the_handler_has_run() -> None:
    code = """
import os, signal
from gpuplex.signal_event import SignalEvent
stop = SignalEvent().catch([signal.SIGUSR1])
assert not stop.is_set()
os.kill(os.getpid(), signal.SIGUSR1)
print(stop.requested, stop.is_set(), stop.event.wait(10))
"""
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "True", "True"]
