"""The docs name the `gpuplex` commands the CLI has: docs/architecture.md's CLI row lists every
top-level command and command group the typer app registers, and nothing else; and every
`gpuplex COMMAND [SUBCOMMAND]` written in README.md or docs/ (inline code or a command line in a
code block) names a command that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer._click import Command, Context
from typer.core import TyperGroup

from gpuplex.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"`([^`]+)`")
#: `gpuplex up ...` in inline code (which may wrap onto the next line) ...
INLINE_COMMAND = re.compile(r"`gpuplex\s+([^`]*)`")
#: ... and a command line in a fenced block: `gpuplex up ...` or `$ gpuplex up ...`.
FENCED_COMMAND = re.compile(r"^\s*(?:\$\s+)?gpuplex\s+(.*)$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
#: A title a program prints, not a command: `gpuplex planner benchmark: machine and input`.
TITLE = re.compile(r"^(?:[a-z-]+ )*[a-z-]+:(?:\s|$)")
WORD = re.compile(r"[a-z][a-z0-9-]*")


def command_tree(command: Command) -> dict[str, set[str]]:
    """Each top-level command -> the names of its subcommands (empty for a plain command)."""
    assert isinstance(command, TyperGroup)
    context = Context(command)
    tree: dict[str, set[str]] = {}
    for name in command.list_commands(context):
        sub = command.get_command(context, name)
        assert sub is not None, name
        if isinstance(sub, TyperGroup):
            tree[name] = set(sub.list_commands(Context(sub, parent=context)))
        else:
            tree[name] = set()
    return tree


COMMANDS = command_tree(typer.main.get_command(app))


def cli_row(markdown: str) -> tuple[int, str]:
    """(line number, what-it-does cell) of the `| **CLI** |` row of the stages table."""
    for number, line in enumerate(markdown.splitlines(), start=1):
        if line.startswith("| **CLI** |"):
            return number, line.split("|")[2]
    raise LookupError("docs/architecture.md has no `| **CLI** |` row")


def unknown_command(words: list[str], tree: dict[str, set[str]]) -> str | None:
    """What in `gpuplex WORDS...` is not a command, or None when it names one (only words that
    look like command names are read: options and arguments after the command are skipped)."""
    if not words or not WORD.fullmatch(words[0]):
        return None
    name, *rest = words
    if name not in tree:
        return f"no command {name!r}"
    if tree[name] and rest and WORD.fullmatch(rest[0]) and rest[0] not in tree[name]:
        return f"no command {rest[0]!r} in {name!r} (it has {', '.join(sorted(tree[name]))})"
    return None


def commands_written(page: Path) -> list[tuple[int, str]]:
    """(line, the words after `gpuplex`) of every command written on the page."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in FENCE.finditer(text):
        first_line = text.count("\n", 0, block.start()) + 1
        for match in FENCED_COMMAND.finditer(block.group()):
            if TITLE.match(match[1]):
                continue
            found.append((first_line + block.group().count("\n", 0, match.start()), match[1]))
    prose = FENCE.sub(lambda block: "\n" * block.group().count("\n"), text)
    for match in INLINE_COMMAND.finditer(prose):
        found.append((prose.count("\n", 0, match.start()) + 1, match[1]))
    return sorted(found)


def test_the_walk_finds_plain_commands_and_groups() -> None:
    assert COMMANDS["validate"] == set()
    assert {"run", "status", "down"} <= COMMANDS["host"]
    assert {"submit", "logs"} <= COMMANDS["job"]


def test_the_command_reader_skips_options_and_arguments() -> None:
    tree = {"host": {"run", "status"}, "plan": set()}
    assert unknown_command(["host", "run", "gpuplex.yaml"], tree) is None
    assert unknown_command(["plan", "examples/laptop.yaml", "-o", "json"], tree) is None
    assert unknown_command(["host", "--help"], tree) is None
    assert unknown_command(["--version"], tree) is None
    assert unknown_command(["hosts"], tree) == "no command 'hosts'"
    assert (
        unknown_command(["host", "stop"], tree)
        == "no command 'stop' in 'host' (it has run, status)"
    )


def test_the_page_reader_finds_inline_and_fenced_commands(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "a `gpuplex up` and `gpuplex job\nlist`\n```\n$ gpuplex plan x\ngpuplex.yaml\n"
        "gpuplex planner benchmark: machine\ngpuplex host run\n```\n"
    )
    assert commands_written(page) == [(1, "job\nlist"), (1, "up"), (4, "plan x"), (7, "host run")]


def test_the_architecture_cli_row_lists_every_command_and_group() -> None:
    number, cell = cli_row(ARCHITECTURE.read_text(encoding="utf-8"))
    written = [code.removeprefix("gpuplex ").split() for code in CODE.findall(cell)]
    listed = {words[0] for words in written}
    missing = sorted(set(COMMANDS) - listed)
    assert missing == [], f"docs/architecture.md:{number}: the CLI row lacks {missing}"
    wrong = [
        f"`{' '.join(words)}`: {problem}"
        for words in written
        if (problem := unknown_command(words, COMMANDS))
    ]
    assert wrong == [], f"docs/architecture.md:{number}: the CLI row names {wrong}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_written_in_the_docs_exists(page: Path) -> None:
    wrong = [
        f"{page.name}:{number}: `gpuplex {' '.join(words.split())}`: {problem}"
        for number, words in commands_written(page)
        if (problem := unknown_command(words.split(), COMMANDS))
    ]
    assert wrong == []


def what_exists_today(markdown: str) -> tuple[int, str]:
    """(first line number, text) of README's "What exists today" list: from that heading to the
    first line that is neither a list item nor its continuation."""
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("**What exists today**"))
    end = start + 1
    while end < len(lines) and (not lines[end] or lines[end].startswith(("- ", "  "))):
        end += 1
    return start + 1, "\n".join(lines[start:end])


def test_readmes_first_screen_names_every_command() -> None:
    """What a newcomer reads first names every top-level command (as `gpuplex NAME` or, in a run of
    them, `NAME`), so a part that grows a command cannot be left out of it."""
    number, text = what_exists_today((ROOT / "README.md").read_text(encoding="utf-8"))
    named = {code.removeprefix("gpuplex ").split()[0] for code in CODE.findall(text) if code}
    missing = sorted(set(COMMANDS) - named)
    assert missing == [], f"README.md:{number}: 'What exists today' does not name {missing}"
