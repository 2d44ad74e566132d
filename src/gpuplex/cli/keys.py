"""`gpuplex keys create | list | revoke`: the gateway's API keys, in the store.

A new key is printed once and never again: the store keeps only its SHA-256. Lists show the public
prefix, never the key or its hash.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import (
    StoreOption,
    opened_store,
    os_user_name,
    parse_duration,
    reported,
)
from gpuplex.cli.help_pages import command_group
from gpuplex.clock import utc_now
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.core.rate_limit_bounds import (
    MAX_CONCURRENT_REQUESTS,
    MAX_REQUESTS_PER_MIN,
    MAX_TOKENS_PER_MIN,
)
from gpuplex.errors import NotFoundError

if TYPE_CHECKING:
    from gpuplex.core.spec import GpuplexSpec
    from gpuplex.store import Engine
    from gpuplex.store.keys import ApiKey, KeyRepository

keys_app = command_group("API keys for the gateway: create (shown once), list, revoke.")
out = stdout_console()
err = stderr_console()


class KeysOutput(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOption = Annotated[KeysOutput, typer.Option("--output", "-o")]


@keys_app.command("create")
def create_command(
    tenant: Annotated[str, typer.Option(help="The tenant the key calls as.", show_default=False)],
    name: Annotated[str, typer.Option(help="A label to recognise the key by.")] = "",
    model: Annotated[
        list[str] | None,
        typer.Option("--model", "-m", help="A model the key may call (repeat); none: all."),
    ] = None,
    expires_in: Annotated[
        str | None, typer.Option(help="Lifetime: 30d, 12h or 90m [default: never expires]")
    ] = None,
    rpm: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_REQUESTS_PER_MIN, help="Requests per minute for this key."),
    ] = None,
    tpm: Annotated[
        int | None,
        typer.Option(min=1, max=MAX_TOKENS_PER_MIN, help="Tokens per minute for this key."),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, max=MAX_CONCURRENT_REQUESTS, help="Requests in flight at once for this key."
        ),
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(help="A gpuplex.yaml: check the tenant exists and serves each --model."),
    ] = None,
    store: StoreOption = None,
    output: OutputOption = KeysOutput.TABLE,
) -> None:
    """Create a key and print it ONCE: only its hash is kept."""
    from gpuplex.core.spec.rate_limits import RateLimits
    from gpuplex.specfile import load_spec_file

    with reported():
        if not tenant.strip():
            raise typer.BadParameter("must not be empty", param_hint="--tenant")
        models = list(dict.fromkeys(model or []))
        lifetime = parse_duration(expires_in) if expires_in is not None else None
        if spec is not None:
            check_against_spec(load_spec_file(spec), str(spec), tenant, models)
        from gpuplex.store.keys import KeyRepository

        now = utc_now()
        with opened_store(store) as engine:
            if spec is None:
                _check_against_the_applied_spec(engine, tenant, models)
            token, key = KeyRepository(engine).create(
                tenant,
                name,
                models,
                now + lifetime if lifetime is not None else None,
                RateLimits(
                    requests_per_min=rpm, tokens_per_min=tpm, concurrent_requests=concurrency
                ),
                now,
                actor=os_user_name(),
            )
        if output is KeysOutput.JSON:
            sys.stdout.write(json.dumps({"key": token, **key_json(key, now)}, indent=2) + "\n")
            err.print("store this key now: it will not be shown again", highlight=False)
            return
        out.print(
            f"created key [bold]{key.prefix}[/] for tenant {escape(key.tenant)} "
            f"(models: {escape(_models_text(key))}; expires: {_when(key.expires_at, 'never')})",
            highlight=False,
            soft_wrap=True,
        )
        out.print(token, markup=False, highlight=False, soft_wrap=True)
        out.print("[yellow]store this key now: it will not be shown again[/]", highlight=False)


@keys_app.command("list")
def list_command(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    store: StoreOption = None,
    output: OutputOption = KeysOutput.TABLE,
) -> None:
    """The keys and their state (active, expired, revoked, suspended); never the key itself."""
    with reported():
        with _key_store(store) as repository:
            keys = repository.list(tenant)
        now = utc_now()
        if output is KeysOutput.JSON:
            sys.stdout.write(json.dumps([key_json(key, now) for key in keys], indent=2) + "\n")
            return
        if not keys:
            out.print("no API keys" + (f" for tenant {escape(tenant)}" if tenant else ""))
            return
        out.print(keys_table(keys, now))


@keys_app.command("revoke")
def revoke_command(
    prefix: Annotated[str, typer.Argument(help="The key's prefix, as `keys list` shows it.")],
    store: StoreOption = None,
) -> None:
    """Revoke a key: the gateway refuses it within a second. Revoking twice is harmless."""
    with reported():
        now = utc_now()
        with _key_store(store) as keys:
            key = keys.revoke(prefix.strip(), now, actor=os_user_name())
        verb = "revoked" if key.revoked_at == now else "already revoked"
        when = _when(key.revoked_at, "")
        out.print(f"{verb}: key {key.prefix} of tenant {escape(key.tenant)}, at {when}")


@contextmanager
def _key_store(store: str | None, *, must_exist: bool = True) -> Iterator[KeyRepository]:
    """The keys in the store at `store` (default: $GPUPLEX_STORE_URL, else the home's)."""
    from gpuplex.store.keys import KeyRepository

    with opened_store(store, must_exist=must_exist) as engine:
        yield KeyRepository(engine)


def _check_against_the_applied_spec(engine: Engine, tenant: str, models: list[str]) -> None:
    """Without --spec: the spec last applied to this store, where there is one (the control
    plane's, or `gpuplex up`'s); else a warning that nothing was checked."""
    from gpuplex.specfile import load_spec_text
    from gpuplex.store.spec_revisions import SpecRevisions

    current = SpecRevisions(engine).current()
    if current is None:
        err.print(
            f"[yellow]warning[/]: no spec is applied to this store and no --spec was given: "
            f"tenant {escape(tenant)!r} and its models are not checked",
            highlight=False,
            soft_wrap=True,
        )
        return
    source = f"the store's spec (revision {current.revision})"
    check_against_spec(load_spec_text(current.spec_yaml, source=source), source, tenant, models)


def check_against_spec(spec: GpuplexSpec, source: str, tenant: str, models: list[str]) -> None:
    """The tenant must be in `spec` (read from `source`), and serve every model the key names (as
    the gateway routes them)."""
    from gpuplex.core.serve.routes import route_table
    from gpuplex.core.spec.parse import did_you_mean

    routes = route_table(spec, spec.gateway.backend_host, spec.gateway.backends)
    tenants = routes.tenants
    if tenant not in tenants:
        hint = did_you_mean(tenant, tenants)
        raise NotFoundError(
            f"{source}: no tenant {tenant!r}{hint}; tenants: {', '.join(sorted(tenants)) or 'none'}"
        )
    served = set(routes.models_of(tenant))
    for name in models:
        if name not in served:
            hint = did_you_mean(name, served)
            raise NotFoundError(
                f"{source}: tenant {tenant!r} does not serve model {name!r}{hint}; "
                f"it serves: {', '.join(sorted(served)) or 'no models'}"
            )


def key_json(key: ApiKey, now: datetime) -> dict[str, Any]:
    return {
        "prefix": key.prefix,
        "tenant": key.tenant,
        "name": key.name,
        "models": list(key.models),
        "created_at": key.created_at.isoformat(),
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
        "suspended_at": key.suspended_at.isoformat() if key.suspended_at else None,
        "made_by": key.made_by.shown() if key.made_by is not None else None,
        **key.limits.model_dump(),
        "state": key.state(now),
    }


def keys_table(keys: list[ApiKey], now: datetime) -> Table:
    table = Table(title="API keys (times in UTC)", title_justify="left")
    for column in ("prefix", "tenant", "name", "models", "created", "expires", "state"):
        table.add_column(
            column,
            no_wrap=column in ("prefix", "state"),
            overflow="fold" if column in ("tenant", "name", "models") else "ellipsis",
        )
    colours = {"active": "green", "expired": "yellow", "revoked": "red", "suspended": "magenta"}
    for key in keys:
        state = key.state(now)
        table.add_row(
            key.prefix,
            escape(key.tenant),
            escape(key.name) or "-",
            escape(_models_text(key)),
            _when(key.created_at, "-", utc_suffix=False),
            _when(key.expires_at, "never", utc_suffix=False),
            f"[{colours[state]}]{state}[/]",
        )
    return table


def _models_text(key: ApiKey) -> str:
    return ", ".join(key.models) if key.models else "all"


def _when(at: datetime | None, default: str, *, utc_suffix: bool = True) -> str:
    if at is None:
        return default
    return at.strftime("%Y-%m-%d %H:%M") + (" UTC" if utc_suffix else "")
