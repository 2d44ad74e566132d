"""The usage mover: a process of its own beside the gateway's workers, moving the usage spool into
the store every second.

It is not a task inside a worker because moving is CPU work in Python (decoding records, building
the insert): in a thread of a serving worker it holds the GIL for tens of milliseconds a pass, and
every request in flight waits that long (docs/benchmarks.md measured it in the gateway's p99).
The workers only append to the spool; this process does the rest. Claims are by file lock, so the
workers' own last pass at shutdown and this process never move a segment twice.

`gpuplex gateway` starts it and stops it with SIGTERM after the workers have stopped; it then makes
one last pass. If the gateway process itself is killed, the mover sees its parent change, makes a
last pass and exits, and whatever it could not move waits in the spool for the next start.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from multiprocessing.process import BaseProcess
from pathlib import Path

from gpuplex.errors import StoreError
from gpuplex.gateway.spool_mover import SpoolMover
from gpuplex.signal_event import SignalEvent
from gpuplex.store.db import open_store
from gpuplex.store.usage import UsageRepository

log = logging.getLogger(__name__)

#: How long the gateway waits for the mover's last pass before it kills it (the records stay in
#: the spool for the next start).
STOP_TIMEOUT_S = 30.0


def start_mover(spool_dir: Path, store_url: str, interval_s: float = 1.0) -> BaseProcess:
    """Start the mover process; it exits when stopped or when this process is gone."""
    context = multiprocessing.get_context("spawn")  # nothing of the parent's state comes along
    process = context.Process(
        target=_main,
        args=(spool_dir, store_url, os.getpid(), interval_s),
        name="gpuplex-usage-mover",
    )
    process.start()
    return process


def stop_mover(process: BaseProcess) -> None:
    """SIGTERM, then wait for its last pass; kill it if that takes longer than STOP_TIMEOUT_S."""
    if process.is_alive():
        process.terminate()
        process.join(STOP_TIMEOUT_S)
    if process.is_alive():
        log.warning("the usage mover did not stop within %.0f s; killing it", STOP_TIMEOUT_S)
        process.kill()
        process.join()


def _main(spool_dir: Path, store_url: str, parent_pid: int, interval_s: float) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # SIGINT too: Ctrl-C reaches the whole process group
    stop = SignalEvent().catch((signal.SIGTERM, signal.SIGINT)).event

    def parent_alive() -> bool:
        return os.getppid() == parent_pid

    sink: UsageRepository | None = None
    while sink is None and not stop.is_set() and parent_alive():
        try:
            sink = UsageRepository(open_store(store_url))
        except StoreError as error:  # the records wait in the spool meanwhile
            log.warning("usage mover: %s; trying again in %g s", error.message, interval_s)
            stop.wait(interval_s)
    if sink is not None:
        SpoolMover(spool_dir, sink).run(stop, interval_s, keep_going=parent_alive)
