"""`gpuplex kube render | diff | apply`: the spec and its plan as Kubernetes objects, what applying
them would change in a cluster, and applying them (server-side apply, then pruning what gpuplex
applied before and no longer renders).

Two sets, never mixed: the plan's (tenant namespaces, quotas, RBAC, network policies, device-plugin
and MIG configs, node labels, the admission policy, workloads) and, with `--self`, gpuplex's own
server and gateway. A cluster that cannot be reached exits 3, a refusal by RBAC 4, a refusal that
goes away on its own (a namespace still being deleted) 5, any other refusal by the API 1, a plan
Kubernetes cannot express 2; never with a traceback. `diff` exits with the code `apply` would stop
with, after showing the whole diff; `apply` checks everything with the server's dry run first and
changes nothing when that check is refused. `render` needs only the base install; `diff` and
`apply` talk to the cluster through the Kubernetes client of the `kube` extra, and without it exit
2 saying how to install it (gpuplex/extras.py).
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from gpuplex.cli.conventions import reported
from gpuplex.cli.help_pages import command_group
from gpuplex.cli.kube_options import ContextOption, KubeconfigOption
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.core.plural import counted
from gpuplex.extras import require_extra

if TYPE_CHECKING:
    from gpuplex.kube.render import Rendered
    from gpuplex.kube.self_manifests import SelfOptions
    from gpuplex.revision import AppliedRevision

kube_app = command_group(
    "Kubernetes: render the spec and plan as objects, diff them against a cluster, apply them."
)
out = stdout_console()
err = stderr_console()


class DryRun(StrEnum):
    NONE = "none"
    SERVER = "server"


SpecFile = Annotated[
    Path | None,
    typer.Argument(
        help="The gpuplex.yaml to plan and render; without it, the applied revision in the store.",
        show_default=False,
    ),
]
StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Without a spec file: render the control plane's applied revision from this store "
        "(a SQLAlchemy URL), its spec and its plan as stored, never planned again.",
        show_default="$GPUPLEX_STORE_URL, else sqlite:///$GPUPLEX_HOME/store/gpuplex.db",
    ),
]
SelfFlag = Annotated[
    bool,
    typer.Option("--self", help="gpuplex's own server and gateway instead of the plan's objects."),
]
CurrentOption = Annotated[
    Path | None, typer.Option(help="A plan JSON to re-plan against: keep what still fits.")
]
ImageOption = Annotated[
    str | None, typer.Option(help="With --self: the gpuplex image the server and gateway run.")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="With --self: a self-hosting option, e.g. --set gateway_max_replicas=20 "
        "--set store_secret=pg-url (repeatable; lists as a,b; maps as k=v,k2=v2).",
    ),
]


@kube_app.command("render")
def render_command(
    file: SpecFile = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write one file per object into this directory."),
    ] = None,
    self_set: SelfFlag = False,
    current: CurrentOption = None,
    image: ImageOption = None,
    settings: SetOption = None,
    store: StoreOption = None,
) -> None:
    """Print the Kubernetes objects of the plan (or of gpuplex itself).

    One YAML stream in apply order on stdout, or one file per object with -o; notes about what
    Kubernetes can only approximate go to stderr."""
    from gpuplex.kube.output import to_yaml, write_directory

    with reported():
        rendered, _ = _render(file, store, self_set, current, image, settings)
    _print_notes(rendered.notes)
    if output is None:
        sys.stdout.write(to_yaml(rendered.manifests))
        return
    try:
        written = write_directory(rendered.manifests, output)
    except OSError as error:
        raise typer.BadParameter(
            f"cannot write {output}: {error.strerror}", param_hint="--output"
        ) from None
    err.print(
        f"wrote {counted(len(written), 'file')} to {escape(str(output))}",
        highlight=False,
        soft_wrap=True,
    )


@kube_app.command("diff")
def diff_command(
    file: SpecFile = None,
    self_set: SelfFlag = False,
    current: CurrentOption = None,
    image: ImageOption = None,
    settings: SetOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
    store: StoreOption = None,
) -> None:
    """Show what `gpuplex kube apply` would create, change and prune.

    Each object is read from the cluster and its apply dry-run by the API server, so the change
    shown is the one the server would make. Changes nothing. Where the server refuses an object,
    the diff says so and exits with the code apply would stop with."""
    from gpuplex.cli.kube_view import diff_table, progress_bar
    from gpuplex.kube.apply import connect
    from gpuplex.kube.diff import first_stop, summary
    from gpuplex.kube.sync import diff_set

    with reported():
        require_extra("kube", "gpuplex kube diff")
        rendered, set_name = _render(file, store, self_set, current, image, settings)
        _print_notes(rendered.notes)
        with (
            connect(kubeconfig, context) as transport,
            progress_bar("diffing", len(rendered.manifests)) as step,
        ):
            changes = diff_set(transport, rendered.manifests, set_name, on_change=step)
    table = diff_table(changes)
    if table.row_count:
        out.print(table)
    out.print(summary(changes), highlight=False, soft_wrap=True)
    stop = first_stop(changes)
    if stop is not None and stop.code is not None:
        err.print(
            f"[red]error[/]: apply would change nothing: the API server refuses "
            f"{escape(stop.object_id)}: {escape(stop.note)}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(stop.code.exit_code)


@kube_app.command("apply")
def apply_command(
    file: SpecFile = None,
    self_set: SelfFlag = False,
    dry_run: Annotated[
        DryRun,
        typer.Option(help="server: the API server checks every object and changes nothing."),
    ] = DryRun.NONE,
    prune: Annotated[
        bool,
        typer.Option(help="Delete objects of this set that gpuplex applied and no longer renders."),
    ] = True,
    current: CurrentOption = None,
    image: ImageOption = None,
    settings: SetOption = None,
    context: ContextOption = None,
    kubeconfig: KubeconfigOption = None,
    store: StoreOption = None,
) -> None:
    """Apply the objects to the cluster, then prune what is no longer rendered.

    First the API server checks the whole apply (a dry run); if it refuses anything, nothing is
    changed. Server-side apply with field manager gpuplex, namespaces and cluster-scoped objects
    first. Nodes are only labelled and tainted, never created or deleted."""
    from gpuplex.cli.kube_view import printing, progress_bar
    from gpuplex.kube.apply import connect
    from gpuplex.kube.diff import summary
    from gpuplex.kube.sync import apply_set

    server_dry_run = dry_run is DryRun.SERVER
    with reported():
        require_extra("kube", "gpuplex kube apply")
        rendered, set_name = _render(file, store, self_set, current, image, settings)
        _print_notes(rendered.notes)
        passes = 1 if server_dry_run else 2  # the check, then the apply
        with (
            connect(kubeconfig, context) as transport,
            progress_bar("applying", passes * len(rendered.manifests)) as step,
        ):
            changes = apply_set(
                transport,
                rendered.manifests,
                set_name,
                dry_run=server_dry_run,
                prune=prune,
                on_change=printing(step, dry_run=server_dry_run),
                on_check=step.checking,
            )
    if server_dry_run:
        out.print(
            f"{summary(changes)} (server dry run: nothing was changed)",
            highlight=False,
            soft_wrap=True,
        )
    else:
        out.print(summary(changes, done=True), highlight=False, soft_wrap=True)


def _render(
    file: Path | None,
    store: str | None,
    self_set: bool,
    current: Path | None,
    image: str | None,
    settings: list[str] | None,
) -> tuple[Rendered, str]:
    from gpuplex.kube.naming import PLAN_SET, SELF_SET
    from gpuplex.kube.render import render_plan, render_self

    if not self_set and (image is not None or settings):
        raise typer.BadParameter("--image and --set are options of --self", param_hint="--set")
    if self_set and current is not None:
        raise typer.BadParameter("--self renders no plan", param_hint="--current")
    if file is not None and store is not None:
        raise typer.BadParameter("give a spec file or --store, not both", param_hint="FILE")
    if file is None:
        if current is not None:
            raise typer.BadParameter(
                "the applied revision's plan is rendered as stored", param_hint="--current"
            )
        from gpuplex.settings import default_store_url

        applied = applied_revision(store or default_store_url())
        if self_set:
            return render_self(applied.spec, self_options(image, settings or [])), SELF_SET
        return render_plan(applied.spec, applied.plan), PLAN_SET
    assert file is not None
    from gpuplex.core.plan import Target, make_plan
    from gpuplex.planfile import load_plan_file
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(file)
    if self_set:
        return render_self(spec, self_options(image, settings or [])), SELF_SET
    # the spec is applied here: planned once, against --current when given
    previous = load_plan_file(current) if current is not None else None
    return render_plan(spec, make_plan(spec, previous, target=Target.KUBERNETES)), PLAN_SET


def applied_revision(store_url: str) -> AppliedRevision:
    """The store's applied revision, read through the one seam every process uses."""
    from gpuplex.errors import NotFoundError
    from gpuplex.revision import AppliedRevisions
    from gpuplex.store.db import open_store, safe_url
    from gpuplex.store.spec_revisions import SpecRevisions

    engine = open_store(store_url)
    try:
        applied = AppliedRevisions(SpecRevisions(engine)).get()
    finally:
        engine.dispose()
    if applied is None:
        raise NotFoundError(f"no spec is applied in the store {safe_url(store_url)} yet")
    return applied


def self_options(image: str | None, settings: list[str]) -> SelfOptions:
    """SelfOptions from `--image` and `--set KEY=VALUE`, each value read as its field's type."""
    from gpuplex.kube.self_manifests import SelfOptions

    types_by_name = typing.get_type_hints(SelfOptions)
    known = [field.name for field in dataclasses.fields(SelfOptions)]
    values: dict[str, Any] = {} if image is None else {"image": image}
    for setting in settings:
        raw_key, sep, text = setting.partition("=")
        key = raw_key.strip().replace("-", "_")
        if not sep or key not in known:
            raise typer.BadParameter(
                f"{setting!r}: write KEY=VALUE with KEY one of {', '.join(known)}",
                param_hint="--set",
            )
        values[key] = _typed(key, text.strip(), types_by_name[key])
    return SelfOptions(**values)


def _typed(key: str, text: str, hint: Any) -> Any:
    optional = isinstance(hint, types.UnionType) and type(None) in typing.get_args(hint)
    if optional:
        if text.lower() in ("", "none", "null"):
            return None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    origin = typing.get_origin(hint)
    items = [part.strip() for part in text.split(",") if part.strip()]
    if hint is bool:
        if text.lower() in ("true", "yes", "on", "1"):
            return True
        if text.lower() in ("false", "no", "off", "0"):
            return False
    elif hint is int:
        if text.lstrip("-").isdigit():
            return int(text)
    elif hint is str:
        return text
    elif origin is tuple:
        return tuple(items)
    elif origin is dict:
        pairs = [item.partition("=") for item in items]
        if all(sep and name for name, sep, _ in pairs):
            return {name.strip(): value.strip() for name, _, value in pairs}
    raise typer.BadParameter(f"{key}={text!r} is not a {_type_name(hint)}", param_hint="--set")


def _type_name(hint: Any) -> str:
    names = {bool: "true or false", int: "whole number", str: "text"}
    if hint in names:
        return names[hint]
    return "list of k=v pairs" if typing.get_origin(hint) is dict else str(hint)


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        err.print(f"[yellow]note[/]: {escape(note)}", highlight=False, soft_wrap=True)


from gpuplex.cli.kube_extender import extender_command  # noqa: E402 - registered after the group

kube_app.command("extender")(extender_command)
