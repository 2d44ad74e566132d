"""`gpuplex job show` lists each attempt of a job: when its process ran, how it ended, its exit
code and the seconds it is billed; and how many of its retries it has used (with when the next
may start), with what a tenant wrote in an attempt's reason escaped."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from gpuplex.cli.job_view import job_panel


def reply(**fields: Any) -> dict[str, Any]:
    return {
        "id": "j0000abcd",
        "tenant": "contoso",
        "name": "train",
        "state": "queued",
        "reason": "exited 3; retry 1 of 2 after 10 s; queued again as attempt 2",
        "priority": 0,
        "submitted_at": "2026-03-10T12:00:00+00:00",
        "started_at": None,
        "finished_at": None,
        "attempts": 1,
        "failures": 1,
        "not_before": "2026-03-10T12:01:10+00:00",
        "exit_code": None,
        "placement": None,
        "submitted_by": "ci",
        "cancel_requested": False,
        "job": {"gpu": {"count": 1}, "command": ["train"], "image": None, "backoff_limit": 2},
        "events": [],
        "waiting_reason": "retry 1 of 2 after a failure: not before 12:01:10 UTC, in 8 s",
        "runs": [
            {
                "attempt": 1,
                "node": "box",
                "started_at": "2026-03-10T12:00:00+00:00",
                "ended_at": "2026-03-10T12:01:00+00:00",
                "end_state": "queued",
                "exit_code": 3,
                "reason": "exited 3\x1b[2J; retry 1 of 2 after 10 s",
                "seconds": 60.0,
                "gpu_share": "1",
                "gpu_seconds": "60.0",
            }
        ],
        **fields,
    }


def rendered(job: dict[str, Any]) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=300, color_system=None).print(job_panel(job))
    return buffer.getvalue()


def test_job_show_lists_each_attempt_and_the_retries_used() -> None:
    out = rendered(reply())
    facts = {
        " ".join(line.strip("│ ").split()[:1]): line.strip("│ ").split()[1:]
        for line in out.splitlines()
        if line.strip("│ ")
    }
    assert facts["attempt"] == ["2"]  # its current attempt
    assert "1 of 2 used, next not before 2026-03-10 12:01:10Z" in out
    row = next(line for line in out.splitlines() if " box " in line)
    assert "2026-03-10 12:00:00Z" in row
    assert "2026-03-10 12:01:00Z" in row
    assert "queued" in row
    assert " 3 " in row  # its exit code
    assert "60.0" in row  # the seconds billed
    assert "\\x1b[2J" in row  # what the job wrote, escaped
    assert "\x1b[2J" not in out


def test_a_job_without_retries_says_so() -> None:
    out = rendered(reply(failures=0, not_before=None, runs=[], job={"gpu": {"count": 1}}))
    assert "none (backoff_limit 0)" in out
    assert "attempts" not in out  # no attempt has run: no table
