"""How `gpuplex job` prints what the jobs API answers: a table of jobs, one job with its events
and why it waits, its log lines.

What a tenant wrote (its job's command, its log lines) reaches the terminal of whoever reads it,
an operator included, so every control character in it is printed as a visible escape (`\x1b`):
a job cannot move the cursor, retitle the window or write the clipboard of the reader's terminal.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

STATE_STYLES = {
    "queued": "yellow",
    "starting": "cyan",
    "running": "green",
    "preempting": "magenta",
    "stopping": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "timed_out": "red",
}


#: Control characters (C0 but tab, DEL, C1) and the Unicode line and paragraph separators.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with each control character as a visible escape: `\x1b`, `\u2028`."""
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], text)


def shown(text: str) -> str:
    """`text` for rich: control characters made visible, markup escaped."""
    return escape(printable(text))


class JobOutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"


def jobs_table(tenant: str, items: list[dict[str, Any]]) -> Table:
    """One row per job; `reason` is why a queued job waits now (as `job show` says it), else
    the reason of its last state change."""
    table = Table(title=escape(f"Jobs of {tenant}"), title_justify="left")
    for column in ("id", "name", "state", "priority", "gpu", "submitted", "reason"):
        table.add_column(column)
    for job in items:
        table.add_row(
            shown(job["id"]),
            shown(job["name"] or ""),
            _state(job["state"]),
            str(job["priority"]),
            shown(gpu_words(job["job"]["gpu"])),
            shown(_time(job["submitted_at"])),
            _reason(job),
        )
    if not items:
        table.caption = "no jobs"
    return table


def job_panel(job: dict[str, Any]) -> RenderableType:
    """The job's fields, its events, and why it waits (a queued job)."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    spec = job["job"]
    rows = [
        ("tenant", job["tenant"]),
        ("name", job["name"] or "-"),
        ("gpu", gpu_words(spec["gpu"])),
        ("command", " ".join(spec.get("command") or []) or "-"),
        ("image", spec.get("image") or "-"),
        ("priority", str(job["priority"])),
        ("submitted", f"{_time(job['submitted_at'])} by {job['submitted_by']}"),
        ("started", _time(job["started_at"])),
        ("finished", _time(job["finished_at"])),
        ("attempt", str(job["attempts"] + 1)),
        ("retries", _retries(job)),
        ("exit code", "-" if job["exit_code"] is None else str(job["exit_code"])),
    ]
    for label, value in rows:
        facts.add_row(label, shown(value))
    facts.add_row("state", _state(job["state"]))
    if job["cancel_requested"] and job["state"] != "cancelled":
        facts.add_row("cancel", "requested: the runner stops it")
    parts: list[RenderableType] = [facts]
    if job.get("waiting_reason"):
        why = printable(job["waiting_reason"])
        parts.append(Text.assemble(("\nwhy it waits: ", "bold yellow"), why))
    if job.get("runs"):
        parts.append(Text(""))
        parts.append(attempts_table(job["runs"]))
    events = Table(title="events", title_justify="left", box=None)
    for column in ("at", "state", "reason"):
        events.add_column(column)
    for event in job["events"]:
        events.add_row(shown(_time(event["at"])), _state(event["state"]), shown(event["reason"]))
    parts.append(Text(""))
    parts.append(events)
    return Panel(Group(*parts), title=shown(f"job {job['id']}"), title_align="left")


def attempts_table(runs: list[dict[str, Any]]) -> Table:
    """Each attempt: when its process ran, how it ended, and the seconds it is billed for."""
    table = Table(title="attempts", title_justify="left", box=None)
    for column in ("#", "node", "started", "ended", "end", "exit", "seconds", "why it ended"):
        table.add_column(column)
    for run in runs:
        seconds = run.get("seconds")
        table.add_row(
            str(run["attempt"]),
            shown(run["node"]),
            shown(_time(run["started_at"])),
            shown(_time(run["ended_at"])),
            _state(run["end_state"]) if run.get("end_state") else "-",
            "-" if run.get("exit_code") is None else str(run["exit_code"]),
            "-" if seconds is None else f"{seconds:.1f}",
            shown(run.get("reason") or "-"),
        )
    return table


def _retries(job: dict[str, Any]) -> str:
    """`1 of 3 used` (`, next not before ...` while a retry waits); `none` without retries."""
    limit = job["job"].get("backoff_limit", 0)
    if not limit:
        return "none (backoff_limit 0)"
    words = f"{job.get('failures', 0)} of {limit} used"
    if job.get("not_before") and job["state"] == "queued":
        words += f", next not before {_time(job['not_before'])}"
    return words


def logs_text(reply: dict[str, Any]) -> str:
    """Each line with its stream, or the note why there are none."""
    if not reply["lines"]:
        return f"({printable(reply['note'] or 'no output')})\n"
    return "".join(f"{line['stream']}: {printable(line['text'])}\n" for line in reply["lines"])


def gpu_words(gpu: dict[str, Any]) -> str:
    """`2 GPUs`, `20 GiB, 50 % compute`, `MIG 1g.10gb`."""
    if gpu.get("count") is not None:
        count = gpu["count"]
        return f"{count} GPU" + ("" if count == 1 else "s")
    if gpu.get("mig_profile") is not None:
        return f"MIG {gpu['mig_profile']}"
    words = f"{gpu.get('memory_gib', 0):g} GiB"
    if gpu.get("compute_percent") is not None:
        words += f", {gpu['compute_percent']} % compute"
    return words


def _reason(job: dict[str, Any]) -> str:
    waiting = job.get("waiting_reason")
    if waiting:
        return f"[yellow]waits:[/] {shown(waiting)}"
    return shown(job["reason"])


def _state(state: str) -> str:
    return f"[{STATE_STYLES.get(state, 'white')}]{shown(state)}[/]"


def _time(at: str | None) -> str:
    """An ISO time as `2026-03-10 12:00:00Z`; `-` for none."""
    if at is None:
        return "-"
    return at.replace("T", " ").replace("+00:00", "Z")[:20].rstrip(".")
