"""`gpuplex store current | upgrade | downgrade`: the store's schema revision, by hand.

Every gpuplex process upgrades the store to its own newest revision when it opens it, so these
are for the rest: seeing where a store is, upgrading ahead of a deploy, and stepping back down
before running an older gpuplex (which refuses a store newer than it knows)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from gpuplex.cli.conventions import StoreOption, opened_store, reported
from gpuplex.cli.help_pages import command_group
from gpuplex.consoles import stdout_console

store_app = command_group("The store's schema: its revision, upgrade, downgrade.")
out = stdout_console()


@store_app.command("current")
def current_command(store: StoreOption = None) -> None:
    """The store's schema revision, and the newest this gpuplex knows."""
    from gpuplex.store.migrate import HEAD_REVISION, store_revision

    with reported(), opened_store(store, must_exist=True, migrate=False) as engine:
        revision = store_revision(engine)
    shown = revision or "none (empty, or made before migrations)"
    note = "up to date" if revision == HEAD_REVISION else f"newest: {HEAD_REVISION}"
    out.print(f"revision {escape(shown)} ({note})", highlight=False)


@store_app.command("upgrade")
def upgrade_command(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    store: StoreOption = None,
) -> None:
    """Upgrade the store's schema (default: to the newest revision)."""
    from gpuplex.store.migrate import store_revision, upgrade_store

    with reported(), opened_store(store, must_exist=True, migrate=False) as engine:
        upgrade_store(engine, revision)
        now = store_revision(engine)
    out.print(f"[green]store at revision {escape(now or 'base')}[/]", highlight=False)


@store_app.command("downgrade")
def downgrade_command(
    revision: Annotated[
        str, typer.Argument(help="Target revision; base drops every table.", show_default=False)
    ],
    yes: Annotated[
        bool, typer.Option("--yes", help="Go ahead: the data of the tables removed is lost.")
    ] = False,
    store: StoreOption = None,
) -> None:
    """Downgrade the store's schema, e.g. before running an older gpuplex."""
    from gpuplex.store.migrate import downgrade_store, store_revision

    if not yes:
        raise typer.BadParameter(
            "a downgrade deletes the tables and columns newer revisions added, with their data; "
            "add --yes to go ahead",
            param_hint="--yes",
        )
    with reported(), opened_store(store, must_exist=True, migrate=False) as engine:
        downgrade_store(engine, revision)
        now = store_revision(engine)
    out.print(f"[green]store at revision {escape(now or 'base')}[/]", highlight=False)
