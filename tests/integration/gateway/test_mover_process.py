"""The usage mover as the process `gpuplex gateway` runs beside its workers: it moves what the
workers spool into the real store, stops on SIGTERM after a last pass, and exits by itself when
the gateway process that started it is gone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gpuplex.clock import now_s
from gpuplex.gateway.mover_process import start_mover, stop_mover
from gpuplex.gateway.spool import UsageSpool
from gpuplex.store.db import open_store
from gpuplex.store.usage import UsageRepository
from tests.unit.gateway.test_spool import record


def stored_ids(store_url: str) -> set[str]:
    engine = open_store(store_url)
    try:
        return UsageRepository(engine).request_ids()
    finally:
        engine.dispose()


def wait_for(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("not within the time allowed")


def test_it_moves_the_spool_into_the_store_and_stops_on_sigterm(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    spool = UsageSpool(tmp_path / "spool", "w1", segment_max_age_s=0.05)
    for n in range(5):
        spool.append(record(n))
    spool.sync()
    mover = start_mover(tmp_path / "spool", store_url, interval_s=0.05)
    try:
        time.sleep(0.1)
        spool.rotate_if_due(now_s() + 1)
        spool.sync()  # sealed: the mover may take it now
        wait_for(lambda: len(stored_ids(store_url)) == 5)
        for n in range(5, 8):  # appended after the mover's passes began
            spool.append(record(n))
        spool.close()  # a worker stopping seals its segment
    finally:
        started = time.monotonic()
        stop_mover(mover)
    assert mover.exitcode == 0
    assert time.monotonic() - started < 10
    assert stored_ids(store_url) == {
        record(n).request_id for n in range(8)
    }  # the last pass took 5..7
    assert list((tmp_path / "spool").iterdir()) == []


ORPHAN = """
import sys, time
from pathlib import Path
from gpuplex.gateway.mover_process import start_mover
mover = start_mover(Path(sys.argv[1]), sys.argv[2], interval_s=0.05)
print(mover.pid, flush=True)
time.sleep(60)
"""


def test_it_exits_when_the_gateway_that_started_it_is_killed(tmp_path: Path) -> None:
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    spool = UsageSpool(tmp_path / "spool", "w1")
    with subprocess.Popen(  # noqa: S603 - this interpreter, a script written above
        [sys.executable, "-c", ORPHAN, str(tmp_path / "spool"), store_url],
        stdout=subprocess.PIPE,
        text=True,
    ) as gateway:
        assert gateway.stdout is not None
        mover_pid = int(gateway.stdout.readline())
        spool.append(record(1))
        spool.close()  # sealed
        wait_for(lambda: stored_ids(store_url) == {record(1).request_id})  # the mover is at work
        assert not _gone(mover_pid)
        gateway.kill()  # SIGKILL: nothing of the gateway runs to stop the mover
        gateway.wait(10)
    wait_for(lambda: _gone(mover_pid), timeout_s=5)


def _gone(pid: int) -> bool:
    """Exited (a zombie of init counts: it has stopped running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
