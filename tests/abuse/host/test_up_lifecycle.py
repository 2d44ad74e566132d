"""Items 4-6 of the host abuse list, with real `gpuplex up` processes on simulated GPUs:

- a second `up` on the same state directory is refused before it changes anything (keys,
  tokens, spec revisions and the tenants' processes are identical before and after);
- SIGINT at 20 seeded moments of start-up leaves no process of the instance behind (by cgroup,
  command line and environment), and the next `up` starts; after kill -9 of `up`, its gateway
  and host runtime exit by themselves, and the next `up` adopts the tenants and starts;
- the example the banner prints answers 200 on the first try."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.abuse.host.uprun import (
    UpRun,
    free_port,
    instance_cgroup_pids,
    instance_processes,
    small_spec,
    up_base,
)

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

__all__ = ["up_base"]

MOMENTS = 20
SEED = 19


@pytest.fixture
def base(up_base: Path) -> Path:
    return up_base


def nothing_left(run: UpRun, timeout_s: float = 15) -> None:
    """No process of the instance: by cgroup, by process group (of every `up` started), and by
    command line or environment naming its state directory."""
    deadline = time.monotonic() + timeout_s
    while instance_processes(run.state_dir, run.groups) or instance_cgroup_pids(run.state_dir):
        if time.monotonic() > deadline:
            left = instance_processes(run.state_dir, run.groups)
            raise AssertionError(f"left running: {left} {instance_cgroup_pids(run.state_dir)}")
        time.sleep(0.1)


def snapshot(state_dir: Path) -> dict[str, Any]:
    """What a second `up` must not change: the store's keys, tokens and revisions, and the
    tenants' processes."""
    engine = create_engine(f"sqlite:///{state_dir / 'store' / 'gpuplex.db'}")
    try:
        with engine.connect() as connection:
            rows = {
                table: sorted(
                    tuple(map(str, row))
                    for row in connection.execute(text(f"SELECT * FROM {table}"))  # noqa: S608
                )
                for table in ("credentials", "spec_revisions")
            }
    finally:
        engine.dispose()
    state = json.loads((state_dir / "host" / "state.json").read_text())
    rows["pids"] = sorted((r["desired"]["tenant"], r["pid"]) for r in state["records"])
    return rows


def test_the_printed_example_answers_200_on_the_first_try(base: Path) -> None:
    run = UpRun(base, small_spec(free_port(), free_port()))
    run.start()
    try:
        keys = run.wait_for_banner()
        status, reply = run.chat(keys["solo"], "solo-chat")  # at once, no retry
        assert status == 200, reply
    finally:
        assert run.stop() == 0, run.output()
    nothing_left(run)


def test_a_second_up_on_the_same_state_dir_is_refused_and_changes_nothing(base: Path) -> None:
    first = UpRun(base, small_spec(free_port(), free_port()))
    first.start()
    try:
        keys = first.wait_for_banner()
        before = snapshot(first.state_dir)
        assert before["pids"]
        (base / "second").mkdir()
        second = UpRun(base / "second", small_spec(free_port(), free_port()), first.state_dir)
        second.start()
        assert second.wait(60) != 0
        assert "already runs with the state directory" in second.output(), second.output()
        assert f"pid {first.process.pid if first.process else '?'}" in second.output()
        assert snapshot(first.state_dir) == before
        assert first.chat(keys["solo"], "solo-chat")[0] == 200  # the first one still serves
    finally:
        assert first.stop() == 0, first.output()
    nothing_left(first)


def answers_ctrl_c(pid: int) -> bool:
    """Whether gpuplex's own Ctrl-C handling is in place (`gpuplex.cli.entry.CtrlC`, which
    catches SIGALRM, to hold a Ctrl-C that lands inside an import, and SIGINT; the interpreter by
    itself catches only SIGINT), read from the process's `SigCgt` mask in /proc; True once it has
    exited (nothing to wait for)."""
    try:
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
    except FileNotFoundError:
        return True
    if status["State"].split()[0] in ("Z", "X"):
        return True
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGALRM - 1))
    return int(status["SigCgt"], 16) & wanted == wanted


def wait_until_it_answers_ctrl_c(pid: int) -> None:
    """Until gpuplex has installed its Ctrl-C handling, the first thing the `gpuplex` command
    does: a few milliseconds into its start, far longer on a loaded machine. Before that no
    gpuplex code has run, so nothing is started, but the Ctrl-C ends the process with the
    interpreter's own answer: the kernel's (exit -2, no output; in CI 0.64 s after the Popen of
    two `up`s) before the interpreter installs its handler, a KeyboardInterrupt traceback out of
    Python's own start (site, runpy, `import signal`; in CI 0.33 s after the Popen) after it. A
    moment that falls there moves to the first instant gpuplex can take it; from then on, every
    moment counts."""
    deadline = time.monotonic() + 30
    while not answers_ctrl_c(pid):
        assert time.monotonic() < deadline, f"pid {pid} never installed gpuplex's Ctrl-C handling"
        time.sleep(0.001)


def exit_status(run: UpRun, moment: float) -> int:
    try:
        return run.wait(90)
    except AssertionError as hung:
        raise AssertionError(f"Ctrl-C {moment:.3f} s after the start: {hung}") from None


def test_sigint_at_any_moment_of_start_up_leaves_nothing_and_the_next_up_starts(
    base: Path,
) -> None:
    """Two instances at a time (their own state directories and ports), each interrupted at its
    own seeded moment: half the wall time, and start-up under contention is start-up too."""
    # from the first instant (libraries still loading) to about when the banner prints
    seeded = random.Random(SEED)  # one generator: 20 different moments, the same on every run
    moments = [seeded.uniform(0.05, 4.0) for _ in range(MOMENTS)]
    assert len(set(moments)) == MOMENTS
    runs = []
    for lane in ("one", "two"):
        (base / lane).mkdir()
        runs.append(UpRun(base / lane, small_spec(free_port(), free_port())))
    try:
        for first, second in zip(moments[::2], moments[1::2], strict=True):
            started = time.monotonic()
            for run in runs:
                run.start()
            pairs = sorted(zip(runs, (first, second), strict=True), key=lambda pair: pair[1])
            for run, moment in pairs:
                time.sleep(max(0.0, started + moment - time.monotonic()))
                assert run.process is not None
                wait_until_it_answers_ctrl_c(run.process.pid)
                run.process.send_signal(signal.SIGINT)
            codes = [(exit_status(run, moment), moment) for run, moment in pairs]
            for (run, _), (code, moment) in zip(pairs, codes, strict=True):
                assert code in (0, 130), (moment, code, run.output())
                assert "Traceback" not in run.output(), (moment, run.output())
                nothing_left(run)
        run = runs[0]
        run.start("--check")
        assert run.wait(120) == 0, run.output()
        nothing_left(run)
    finally:
        for run in runs:
            run.kill()


def test_after_kill_9_of_up_its_children_exit_and_the_next_up_starts(base: Path) -> None:
    run = UpRun(base, small_spec(free_port(), free_port()))
    try:
        run.start()
        run.wait_for_banner()
        tenants = snapshot(run.state_dir)["pids"]
        assert run.process is not None
        run.process.kill()
        run.wait(10)
        deadline = time.monotonic() + 15
        while any(" gateway " in p or " host run " in p for p in instance_processes(run.state_dir)):
            assert time.monotonic() < deadline, instance_processes(run.state_dir)
            time.sleep(0.1)
        run.start("--check")  # adopts the tenants the killed one left, and starts
        assert run.wait(120) == 0, run.output()
        assert tenants  # they were there to adopt
        nothing_left(run)
    finally:
        run.kill()
