"""How `gpuplex kube diff` and `kube apply` show what they do: the diff table, a progress bar over
the rendered objects, and one kubectl-style line per object applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
)
from rich.table import Table

from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.kube.diff import ObjectAction, ObjectChange

out = stdout_console()
err = stderr_console()

STYLES = {
    ObjectAction.CREATE: "green",
    ObjectAction.CHANGE: "yellow",
    ObjectAction.PRUNE: "red",
    ObjectAction.SKIP: "magenta",
    ObjectAction.UNCHANGED: "dim",
    ObjectAction.RECREATE: "bold red",
    ObjectAction.REFUSED: "bold red",
}
DONE = {
    ObjectAction.CREATE: "created",
    ObjectAction.CHANGE: "changed",
    ObjectAction.PRUNE: "pruned",
    ObjectAction.SKIP: "skipped",
}
_SHOWN_FIELDS = 4


def diff_table(changes: list[ObjectChange]) -> Table:
    """One row per object that would change (unchanged ones are only counted)."""
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("change", no_wrap=True)
    table.add_column("object", overflow="fold")
    table.add_column("fields or note", overflow="fold")
    for change in changes:
        if change.action is ObjectAction.UNCHANGED:
            continue
        shown = list(change.fields[:_SHOWN_FIELDS])
        if len(change.fields) > _SHOWN_FIELDS:
            shown.append(f"(+{len(change.fields) - _SHOWN_FIELDS} more)")
        detail = "\n".join(shown) or change.note
        style = STYLES[change.action]
        table.add_row(
            f"[{style}]{change.action.value}[/]", escape(change.object_id), escape(detail)
        )
    return table


class Steps:
    """Advances a progress bar by one object, naming it with what is done to it."""

    def __init__(self, progress: Progress, task: TaskID, verb: str) -> None:
        self._progress = progress
        self._task = task
        self._verb = verb

    def __call__(self, change: ObjectChange) -> None:
        self.advance(change, self._verb)

    def checking(self, change: ObjectChange) -> None:
        """A step of apply's dry-run check, before the apply itself."""
        self.advance(change, "checking")

    def advance(self, change: ObjectChange, verb: str) -> None:
        if change.action is not ObjectAction.PRUNE:
            self._progress.update(self._task, advance=1, description=f"{verb} {change.object_id}")


@contextmanager
def progress_bar(verb: str, total: int) -> Iterator[Steps]:
    """A progress bar on stderr over the rendered objects (pruned objects come after it); none
    where stderr is not a terminal, so logs get only the lines that say what was done."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        yield Steps(progress, progress.add_task("", total=total), verb)


def printing(
    step: Callable[[ObjectChange], None], *, dry_run: bool
) -> Callable[[ObjectChange], None]:
    """Advance the bar and print what was done to the object, kubectl-style (in a dry run, what
    would be done)."""

    def report(change: ObjectChange) -> None:
        step(change)
        done = change.action.value if dry_run else DONE.get(change.action, change.action.value)
        line = f"[{STYLES[change.action]}]{done}[/] {escape(change.object_id)}"
        if change.note:
            line += f": {escape(change.note)}"
        out.print(line, highlight=False, soft_wrap=True)

    return report
