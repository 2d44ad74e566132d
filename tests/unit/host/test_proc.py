"""What /proc says about processes: a zombie has ended, even before its parent reaps it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuplex.host.proc import group_has_running_process, start_ticks


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def test_a_group_whose_only_process_is_an_unreaped_zombie_has_no_running_process() -> None:
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        assert group_has_running_process(sleeper.pid)
        os.kill(sleeper.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _state(sleeper.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(sleeper.pid) == "Z"  # not reaped yet: this test is its parent
        os.killpg(sleeper.pid, 0)  # the group still exists for signals ...
        assert not group_has_running_process(sleeper.pid)  # ... but nothing in it runs
        assert start_ticks(sleeper.pid) is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_group_that_never_existed_has_no_running_process() -> None:
    assert not group_has_running_process(2**22 + 12345)  # above any pid Linux hands out
