"""Restarts lose nothing, end to end through `gpuplex up` on simulated GPUs.

Jobs with known durations and exit codes run while `up` is stopped with Ctrl-C and started again,
while its host runtime and its gateway are killed with -9 (`up` starts them again), and while
`up` itself is killed with -9 and started again. Each job's process writes, from inside, when
each of its attempts started and ended and with what exit status. Afterwards every job's attempts
(`job_runs`), states and exit codes match what its processes really did, each attempt is billed
within 2 s of the time its process really ran (a job that ended while gpuplex was down is billed
to its real end, not to when gpuplex came back), and no attempt ran twice:

- `ok` exits 0; `flaky` exits 3 twice (backoff_limit 1: a retry, then failed);
- `long` runs across the Ctrl-C: stopped when gpuplex stopped, queued again as attempt 2 (not
  counted as a failure), adopted across the kills, then cancelled (`filler` beside it);
- `late` and `bad` end (0 and 5) while `up` is dead; `claim` (a guarantee) was queued meanwhile
  and starts on a GPU they freed once the host has reported, preempting nobody.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuplex.core.jobs.states import JobState
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.store.db import open_store
from gpuplex.store.job_runs import JobRun
from gpuplex.store.jobs import JobRepository
from tests.abuse.host.uprun import UpRun, free_port, instance_processes, up_base
from tests.jobs_http import show_job, submit_job

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

__all__ = ["up_base"]

GRACE_S = 3
#: billed within this many seconds of the time the process really ran
TOLERANCE_S = 2.0
ADMIN_LINE = re.compile(r"^\s*admin token\s+(?P<token>\S+)\s*$")
#: Writes `start <epoch>` when it starts and `end <epoch> <code>` when it ends (SIGTERM: 143) to
#: a file of its own per attempt in its home folder, then exits with that code.
SCRIPT = (
    'f="$HOME/{name}-$GPUPLEX_JOB_ATTEMPT.times"; echo "start $(date +%s.%N)" >> "$f"; '
    'trap \'echo "end $(date +%s.%N) 143" >> "$f"; exit 143\' TERM; '
    'sleep {seconds} & wait $!; echo "end $(date +%s.%N) {code}" >> "$f"; exit {code}'
)


def job(name: str, seconds: float, code: int = 0, **fields: Any) -> dict[str, Any]:
    command = ["sh", "-c", SCRIPT.format(name=name, seconds=seconds, code=code)]
    return {"name": name, "gpu": {"count": 1}, "command": command, **fields}


def spec(gateway_port: int, model_port: int) -> dict[str, Any]:
    return {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 5}]}]},
        "tenants": [
            {
                "name": "solo",
                "isolation": "dedicated",
                "workloads": [
                    {
                        "name": "chat",
                        "gpu": {"count": 1},
                        "serve": {"model": "solo-chat", "port": model_port},
                        "command": ["serve", "--port", "{port}"],
                    }
                ],
            },
            {"name": "lab", "isolation": "dedicated", "workloads": []},
            {"name": "prio", "isolation": "dedicated", "workloads": []},
        ],
        "gateway": {"port": gateway_port, "health_interval_s": 0.5},
        "queues": {
            "preemption": {"reclaim": True, "min_runtime_s": 0, "grace_s": GRACE_S},
            "organisations": [
                {
                    "name": "org",
                    "teams": [
                        {
                            "name": "all",
                            "tenants": [
                                {"name": "lab"},
                                {"name": "prio", "guarantee": {"gpus": 1}},
                            ],
                        }
                    ],
                }
            ],
        },
    }


@dataclass
class Up:
    """A `gpuplex up` and its REST API."""

    run: UpRun
    token: str = ""
    keys: dict[str, str] | None = None  # tenant -> its demo key

    def start(self) -> None:
        self.run.start()
        self.keys = self.run.wait_for_banner(180)
        found = [m["token"] for line in self.run.lines if (m := ADMIN_LINE.match(line))]
        assert found, self.run.output()
        self.token = found[-1]

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = f"http://127.0.0.1:{self.run.port}/api/v1{path}"
        headers = {"authorization": f"Bearer {self.token}"}
        return httpx.request(method, url, headers=headers, timeout=30, **kwargs)

    def submit(self, tenant: str, body: dict[str, Any]) -> str:
        return submit_job(self.api, tenant, body)

    def show(self, tenant: str, job_id: str) -> dict[str, Any]:
        return show_job(self.api, tenant, job_id)

    def state(self, tenant: str, job_id: str) -> str:
        return str(self.show(tenant, job_id)["state"])

    def child(self, words: str) -> int:
        """The pid of `up`'s child whose command line holds `words`."""
        found = [
            int(line.split(":")[0])
            for line in instance_processes(self.run.state_dir)
            if words in line and "gpuplex.cli" in line
        ]
        assert len(found) == 1, instance_processes(self.run.state_dir)
        return found[0]


def eventually(check: Any, what: str, timeout_s: float, explain: Any = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(
        f"{what}: not within {timeout_s:g} s" + (f"\n{explain()}" if explain else "")
    )


@pytest.fixture
def up(up_base: Path) -> Iterator[Up]:
    run = UpRun(up_base, spec(free_port(), free_port()))
    try:
        yield Up(run)
    finally:
        run.kill()
        if (run.state_dir / "host").exists():  # the tenants: `host down` stops them all
            down = [sys.executable, "-m", "gpuplex.cli", "host", "down", "--forget-users"]
            subprocess.run(  # noqa: S603 - our own CLI
                [*down, "--state-dir", str(run.state_dir / "host")],
                capture_output=True,
                timeout=120,
                check=False,
            )


def real_attempts(home: Path, name: str) -> list[tuple[float, float | None, int | None]]:
    """(start, end, exit code) of each attempt, as the job's own process wrote them."""
    found = []
    for attempt in range(1, 10):
        path = home / f"{name}-{attempt}.times"
        if not path.exists():
            break
        lines = [line.split() for line in path.read_text().splitlines()]
        starts = [float(parts[1]) for parts in lines if parts[0] == "start"]
        ends = [(float(parts[1]), int(parts[2])) for parts in lines if parts[0] == "end"]
        assert len(starts) == 1, f"{name} attempt {attempt} started {len(starts)} times: {lines}"
        end, code = ends[0] if ends else (None, None)
        found.append((starts[0], end, code))
    return found


def test_restarts_stops_and_kills_lose_nothing_and_bill_what_ran(up: Up) -> None:
    began = datetime.now(UTC)
    up.start()
    jobs: dict[str, tuple[str, str]] = {}  # name -> (tenant, id)

    def explain() -> str:
        lines = []
        for name, (tenant, job_id) in jobs.items():
            try:
                shown = up.show(tenant, job_id)
            except (AssertionError, httpx.HTTPError):
                continue
            steps = " -> ".join(f"{e['state']} ({e['reason']})" for e in shown["events"])
            lines.append(f"{name}: {steps}")
        return "\n".join(lines) + "\n" + up.run.output()[-3000:]

    def states_are(wanted: dict[str, set[str]]) -> bool:
        return all(up.state(*jobs[name]) in allowed for name, allowed in wanted.items())

    # --- 1: jobs run; Ctrl-C of `up` while `long` runs -------------------------------------------
    jobs["ok"] = ("lab", up.submit("lab", job("ok", 4)))
    jobs["flaky"] = (
        "lab",
        up.submit("lab", job("flaky", 2, 3, backoff_limit=1, backoff_initial_s=1)),
    )
    jobs["long"] = ("lab", up.submit("lab", job("long", 900)))
    eventually(
        lambda: states_are({"ok": {"succeeded"}, "flaky": {"failed"}, "long": {"running"}}),
        "ok succeeded, flaky failed twice, long running",
        120,
        explain,
    )
    assert up.run.stop(signal.SIGINT) == 0, up.run.output()

    # --- 2: start again: `long` is a new attempt; kill -9 of the host runtime and the gateway ---
    up.start()
    eventually(
        lambda: up.show(*jobs["long"])["attempts"] == 1 and up.state(*jobs["long"]) == "running",
        "long running again, as attempt 2",
        90,
        explain,
    )
    jobs["filler"] = ("lab", up.submit("lab", job("filler", 900)))
    eventually(
        lambda: states_are({n: {"running"} for n in ("long", "filler")}),
        "long and filler running",
        60,
        explain,
    )
    os.kill(up.child(" host run "), signal.SIGKILL)
    eventually(
        lambda: any(
            "host runtime stopped" in line and "started again" in line for line in up.run.lines
        ),
        "up starting its host runtime again",
        30,
        explain,
    )
    os.kill(up.child(" gateway "), signal.SIGKILL)
    eventually(
        lambda: any("gateway stopped" in line and "started again" in line for line in up.run.lines),
        "up starting its gateway again",
        30,
        explain,
    )
    key = (up.keys or {})["solo"]

    def answers() -> bool:
        try:
            return up.run.chat(key, "solo-chat")[0] == 200
        except OSError:  # not listening yet
            return False

    eventually(answers, "the gateway answering again", 60, explain)
    jobs["late"] = ("lab", up.submit("lab", job("late", 12)))
    jobs["bad"] = ("lab", up.submit("lab", job("bad", 13, 5)))
    eventually(
        lambda: states_are({n: {"running"} for n in ("long", "late", "bad", "filler")}),
        "four lab jobs running, long and filler adopted by the new host runtime",
        60,
        explain,
    )

    # --- 3: kill -9 of `up`: `late` and `bad` end while it is dead; a claim is queued meanwhile --
    assert up.run.process is not None
    up.run.process.kill()
    killed_at = time.time()
    up.run.wait(30)
    home = up.run.state_dir / "host" / "homes" / "lab"
    eventually(
        lambda: all(real_attempts(home, n)[-1][1] is not None for n in ("late", "bad")),
        "late and bad ending while up is dead",
        90,
    )
    time.sleep(1)
    engine = open_store(f"sqlite:///{up.run.state_dir / 'store' / 'gpuplex.db'}")
    try:
        claim = JobSpec.model_validate(job("claim", 3) | {"tenant": "prio"})
        jobs["claim"] = (
            "prio",
            JobRepository(engine).submit(claim, now=datetime.now(UTC), actor="t").id,
        )
    finally:
        engine.dispose()
    up.start()
    eventually(
        lambda: states_are({"late": {"succeeded"}, "bad": {"failed"}, "claim": {"succeeded"}}),
        "late succeeded and bad failed as they did, and the claim ran",
        90,
        explain,
    )
    assert states_are({"long": {"running"}, "filler": {"running"}}), explain()  # never preempted
    for name in ("long", "filler"):
        reply = up.api("POST", f"/tenants/lab/jobs/{jobs[name][1]}/cancel")
        assert reply.status_code == 200, reply.text
    eventually(
        lambda: states_are({"long": {"cancelled"}, "filler": {"cancelled"}}),
        "long and filler cancelled",
        60,
        explain,
    )
    shown = {name: up.show(tenant, job_id) for name, (tenant, job_id) in jobs.items()}
    assert up.run.stop(signal.SIGINT) == 0, up.run.output()

    # --- what each job's processes really did, against what gpuplex recorded and billed ---------
    expected = {  # per attempt: (end state, exit code)
        "ok": [(JobState.SUCCEEDED, 0)],
        "flaky": [(JobState.QUEUED, 3), (JobState.FAILED, 3)],
        "long": [(JobState.QUEUED, 143), (JobState.CANCELLED, 143)],
        "late": [(JobState.SUCCEEDED, 0)],
        "bad": [(JobState.FAILED, 5)],
        "filler": [(JobState.CANCELLED, 143)],
        "claim": [(JobState.SUCCEEDED, 0)],
    }
    final = {"ok": 0, "flaky": 3, "long": 143, "late": 0, "bad": 5, "filler": 143, "claim": 0}
    engine = open_store(f"sqlite:///{up.run.state_dir / 'store' / 'gpuplex.db'}")
    try:
        repository = JobRepository(engine)
        runs = {name: repository.runs_of(job_id) for name, (_, job_id) in jobs.items()}
        events = {name: repository.events(job_id) for name, (_, job_id) in jobs.items()}
    finally:
        engine.dispose()
    homes = up.run.state_dir / "host" / "homes"
    for name, (tenant, _) in jobs.items():
        real = real_attempts(homes / tenant, name)
        recorded: list[JobRun] = runs[name]
        assert [(r.end_state, r.exit_code) for r in recorded] == expected[name], (name, recorded)
        assert [r.attempt for r in recorded] == list(range(len(recorded))), name
        assert len(real) == len(recorded), (name, real, recorded)  # no attempt ran twice
        for (start, end, code), run in zip(real, recorded, strict=True):
            assert end is not None, (name, real)
            assert run.ended_at is not None, (name, run)
            assert code == run.exit_code, (name, real, run)
            started, ended = run.started_at.timestamp(), run.ended_at.timestamp()
            assert abs(started - start) <= TOLERANCE_S, (name, start, run)
            assert abs(ended - end) <= TOLERANCE_S, (name, end, run)
            assert abs((ended - started) - (end - start)) <= TOLERANCE_S, (name, real, run)
        assert shown[name]["exit_code"] == final[name], (name, shown[name])
        assert len(shown[name]["runs"]) == len(recorded)
        assert not any(e.state is JobState.PREEMPTING for e in events[name]), name
    assert shown["flaky"]["failures"] == 1
    assert shown["long"]["failures"] == 0  # stopped by gpuplex: not the job's failure
    requeued = [e.reason for e in events["long"] if e.state is JobState.QUEUED][1:]
    assert requeued == [
        "stopped when gpuplex stopped (`gpuplex up` stopped); queued again as attempt 2"
    ]
    late = real_attempts(homes / "lab", "late")[0]
    assert late[1] is not None
    assert late[1] > killed_at  # it did end while `up` was dead
    # billed to its real end, not to the moment gpuplex came back and noticed it
    assert abs(runs["late"][0].ended_at.timestamp() - late[1]) <= TOLERANCE_S  # type: ignore[union-attr]
    log = up.run.state_dir / "host" / "logs" / "lab" / f"job-{jobs['long'][1]}-0.stdout.log"
    headers = [line for line in log.read_text().splitlines() if line.startswith("----- gpuplex")]
    assert [h.split(" attempt ")[1].split()[0] for h in headers] == ["1", "2"], headers
    assert began < runs["ok"][0].started_at
