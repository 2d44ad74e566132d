"""What `gpuplex job` prints of what a tenant wrote (its command, its log lines, reasons) never
carries a control character to the reader's terminal: each is shown as a visible escape."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from gpuplex.cli.job_view import job_panel, jobs_table, logs_text, printable

#: Set the window title, clear the screen, write the clipboard (OSC 52), ring, and a C1 CSI.
HOSTILE = "ok\x1b]0;owned\x07\x1b[2J\x1b]52;c;ZWNobyBoaQ==\x07\x9b31m\u2028end"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain\ttabbed", "plain\ttabbed"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\rb\nc", "a\\rb\\nc"),
        ("\x00\x7f\x9b", "\\x00\\x7f\\x9b"),
        ("line\u2028sep", "line\\u2028sep"),
        ("été ✓", "été ✓"),
    ],
)
def test_printable_makes_control_characters_visible(text: str, shown: str) -> None:
    assert printable(text) == shown


def job_reply(**fields: Any) -> dict[str, Any]:
    return {
        "id": "j0000abcd",
        "tenant": "contoso",
        "name": None,
        "state": "queued",
        "reason": HOSTILE,
        "priority": 0,
        "submitted_at": "2026-03-10T12:00:00+00:00",
        "started_at": None,
        "finished_at": None,
        "attempts": 0,
        "exit_code": None,
        "placement": None,
        "submitted_by": "ci",
        "cancel_requested": False,
        "job": {"gpu": {"count": 1}, "command": ["python", HOSTILE], "image": None},
        "events": [{"at": "2026-03-10T12:00:00+00:00", "state": "queued", "reason": HOSTILE}],
        "waiting_reason": HOSTILE,
        **fields,
    }


def rendered(renderable: Any) -> str:
    buffer = io.StringIO()
    Console(file=buffer, force_terminal=True, width=400).print(renderable)
    return buffer.getvalue()


def test_logs_show_a_hostile_line_escaped() -> None:
    text = logs_text({"lines": [{"stream": "stdout", "text": HOSTILE}], "note": None})
    assert text == f"stdout: {printable(HOSTILE)}\n"
    assert "\x1b" not in text
    assert "\x07" not in text


@pytest.mark.parametrize("view", ["panel", "table"])
def test_a_job_shows_a_hostile_command_and_reasons_escaped(view: str) -> None:
    reply = job_reply()
    out = rendered(job_panel(reply) if view == "panel" else jobs_table("contoso", [reply]))
    # rich adds its own colour codes (`ESC [ ... m`); none of the job's own reach the terminal
    assert "\x1b]" not in out
    assert "\x1b[2J" not in out
    assert "\x07" not in out
    assert "\x9b" not in out
    assert "\u2028" not in out
    assert "owned" in out  # shown, as text
