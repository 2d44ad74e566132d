"""How every `gpuplex` command group is made, so that all help pages read the same way.

- A flag (`--dry-run`, `--yes`, `--help`) shows no `<bool>` type: it takes no value.
- Help text is Markdown: a docstring's lines are one paragraph however the source wraps them,
  so a summary never breaks mid-sentence on a narrow terminal, and `[default: ...]` in a help
  text is never swallowed as console markup.
"""

from __future__ import annotations

import typer
from typer._click import Command, Context, Parameter  # typer's own copy of click's types
from typer.core import TyperGroup, TyperOption


def _without_flag_types(params: list[Parameter]) -> list[Parameter]:
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag:
            param.metavar = ""  # the help page shows the metavar, when set, as the option's type
    return params


class FlagsWithoutTypes(TyperGroup):
    """A command group whose help pages, and its commands', show flags without a type."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return _without_flag_types(super().get_params(ctx))

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None and not isinstance(command, FlagsWithoutTypes):
            _without_flag_types(command.get_params(ctx))
        return command


def command_group(help_text: str) -> typer.Typer:
    """A `gpuplex` command group: its help, flags without types, Markdown help, usage when run
    without a command."""
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        cls=FlagsWithoutTypes,
        rich_markup_mode="markdown",
        pretty_exceptions_enable=False,
        add_completion=False,
    )
