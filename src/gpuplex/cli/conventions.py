"""What the store-backed commands (keys, token, audit, store, server) share: the `--store` option
and how it is opened, lifetimes such as `30d`, who the actor is for the audit log, and how a
gpuplex error ends a command (one line on stderr and the error's exit code, never a traceback).
Every command imports this module, so it imports no spec, plan or store code (spec_warnings.py
holds the warnings about a spec)."""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from gpuplex.consoles import stderr_console
from gpuplex.errors import GpuplexError, StoreError
from gpuplex.settings import (
    HOME_VARIABLE,
    STORE_URL_VARIABLE,
    default_store_url,
    gpuplex_home,
    store_url_is_explicit,
)

if TYPE_CHECKING:
    from gpuplex.store import Engine

err = stderr_console()

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB.",
        show_default=f"${STORE_URL_VARIABLE}, else sqlite:///$GPUPLEX_HOME/store/gpuplex.db",
    ),
]
_DURATION = re.compile(r"^\s*(\d+)\s*([dhm])\s*$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h` or `90m` as a timedelta; a bad value is a usage error (exit 2)."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) == 0:
        raise typer.BadParameter(
            f"{text!r} is not a lifetime: write a positive number and d, h or m (30d, 12h, 90m)",
            param_hint="--expires-in",
        )
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


@contextmanager
def opened_store(
    store: str | None, *, must_exist: bool = False, migrate: bool = True
) -> Iterator[Engine]:
    """The store at `store` (default: $GPUPLEX_STORE_URL, else the home's), closed after.
    `must_exist`: a SQLite file that is not there is an error, not a new empty store (for the
    commands that only read, or change what must already be there). SQLAlchemy is imported
    here: every other `gpuplex` command starts without it."""
    from gpuplex.store.db import open_store

    url = store or default_store_url()
    if must_exist:
        _refuse_missing_sqlite(url, store)
    engine = open_store(url, migrate=migrate)
    try:
        yield engine
    finally:
        engine.dispose()


def _refuse_missing_sqlite(url: str, given: str | None) -> None:
    from gpuplex.store.db import sqlite_file

    database = sqlite_file(url)
    if database is None or database.exists():
        return
    if given is not None:
        source = "with the --store given"
    elif store_url_is_explicit():
        source = f"with ${STORE_URL_VARIABLE}"
    else:
        source = f"in the home {gpuplex_home().root}"
    raise StoreError(
        f"no store at {database}: nothing has run {source} yet; set {HOME_VARIABLE} to the "
        "running instance's state directory (`gpuplex up` prints the line) or give --store; "
        "nothing was created"
    )


def os_user_name() -> str:
    """Who runs the command, for the audit log: the effective user's name, else its uid."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


@contextmanager
def reported() -> Iterator[None]:
    """A gpuplex error ends the command with its exit code and one line on stderr, no traceback
    (also when a sub-app runs on its own, not under `gpuplex`'s own handler)."""
    try:
        yield
    except GpuplexError as error:
        err.print(f"[red]error[/]: {escape(error.message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(error.exit_code) from None
