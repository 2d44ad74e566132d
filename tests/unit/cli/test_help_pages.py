"""Every `gpuplex` help page reads cleanly: flags show no `<bool>` type, each command's summary in
its group's list is a whole sentence, and the options whose default depends on where gpuplex runs
(--store, --state-dir, --spool-dir) say what it is."""

from __future__ import annotations

import functools
import inspect
import re

import pytest
import typer
from typer._click import Command
from typer.core import TyperGroup
from typer.testing import CliRunner

from gpuplex.cli.main import ONE_SHOT_COMMANDS, app, app_for, needs_cycle_collector

DERIVED_DEFAULTS = ("--store", "--state-dir", "--spool-dir")
_runner = CliRunner()


def _walk(command: Command, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Command]]:
    found = [(path, command)]
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            found += _walk(sub, (*path, name))
    return found


COMMANDS = _walk(typer.main.get_command(app), ())


@functools.cache  # a page depends on its path only; several tests read the same pages
def _help_page(path: tuple[str, ...]) -> str:
    done = _runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
    assert done.exit_code == 0, done.output
    return done.output


def _summary(command: Command) -> str:
    first = inspect.cleandoc(command.help or "").split("\n\n")[0]
    return " ".join(first.split())


def _plain(text: str) -> str:
    """The page's words, without the box drawing and the line breaks of its layout."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_the_walk_finds_every_group_and_command() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "host", "host status", "keys list", "token create", "up", "catalog"} <= names
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda p: " ".join(p) or "-")
def test_no_flag_shows_a_bool_type(path: tuple[str, ...]) -> None:
    page = _help_page(path)
    assert "--help" in page
    assert "<bool>" not in page


@pytest.mark.parametrize(
    ("path", "command"), [pytest.param(p, c, id=" ".join(p)) for p, c in COMMANDS if p]
)
def test_each_summary_is_a_whole_sentence_shown_whole(
    path: tuple[str, ...], command: Command
) -> None:
    summary = _summary(command)
    assert summary.endswith((".", ".)")), f"{' '.join(path)}: {summary!r}"
    assert not summary.endswith("..."), f"{' '.join(path)}: cut: {summary!r}"
    listing = _plain(_help_page(path[:-1]))
    shown = _plain(re.sub(r"`", "", summary))  # the listing renders `code` without backticks
    assert shown in listing, f"{' '.join(path)}: {shown!r} is not shown whole"


@pytest.mark.parametrize(
    ("path", "option"),
    [
        pytest.param(path, option, id=f"{' '.join(path)} {option}")
        for path, command in COMMANDS
        for param in command.params
        for option in getattr(param, "opts", [])
        if option in DERIVED_DEFAULTS
    ],
)
def test_derived_defaults_are_shown(path: tuple[str, ...], option: str) -> None:
    lines = _help_page(path).splitlines()
    start = next(i for i, line in enumerate(lines) if f" {option} " in line)
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if re.match(r"^│ +-", line) or not line.startswith("│"):
            break
        block.append(line)
    text = _plain("\n".join(block))
    assert "[default: (" in text, f"{' '.join(path)} {option}: {text!r}"


def test_there_are_derived_defaults_to_check() -> None:
    options = {
        option
        for _, command in COMMANDS
        for param in command.params
        for option in getattr(param, "opts", [])
    }
    assert set(DERIVED_DEFAULTS) <= options


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS if path], ids=" ".join)
def test_the_app_trimmed_to_the_named_command_prints_what_the_whole_app_prints(
    path: tuple[str, ...],
) -> None:
    trimmed = app_for([*path, "--help"])
    assert trimmed is not app
    assert [info.name for info in trimmed.registered_groups] in ([], [path[0]])
    assert len(trimmed.registered_commands) + len(trimmed.registered_groups) == 1
    done = _runner.invoke(trimmed, [*path, "--help"], env={"COLUMNS": "100"})
    assert done.exit_code == 0, done.output
    assert done.output == _help_page(path)


@pytest.mark.parametrize(
    "args",
    [["validate"], ["plan", "--output", "xml", "f.yaml"], ["keys", "lst"], ["host", "--nope"]],
    ids=" ".join,
)
def test_a_mistake_after_a_command_name_reads_as_in_the_whole_app(args: list[str]) -> None:
    whole = _runner.invoke(app, args, env={"COLUMNS": "100"})
    trimmed = _runner.invoke(app_for(args), args, env={"COLUMNS": "100"})
    assert whole.exit_code == trimmed.exit_code == 2
    assert trimmed.output == whole.output


@pytest.mark.parametrize(
    "args", [[], ["--help"], ["--version"], ["valdate", "x"], ["hots", "status"]], ids=" ".join
)
def test_without_a_command_name_first_the_whole_app_runs(args: list[str]) -> None:
    assert app_for(args) is app


def test_only_commands_that_read_print_and_exit_run_without_the_cycle_collector() -> None:
    commands = {path[0] for path, _ in COMMANDS if len(path) == 1}
    assert commands >= ONE_SHOT_COMMANDS  # a renamed command would leave its old name here
    assert not needs_cycle_collector(["validate", "gpuplex.yaml"])
    assert not needs_cycle_collector(["plan", "gpuplex.yaml", "-o", "json"])
    for long_running in ("up", "server", "gateway", "host", "simulate", "job", "sim", "kube"):
        assert needs_cycle_collector([long_running, "--help"]), long_running
    assert needs_cycle_collector([])
    assert needs_cycle_collector(["--help"])
