"""`gpuplex`: validate, plan, explain and schema over the pure core. Bad input exits 2 with a message
naming file:line and field; it never prints a traceback."""

from __future__ import annotations

import copy
import gc
import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from typer.main import get_command_name
from typer.models import CommandInfo

from gpuplex.cli.audit import audit_app
from gpuplex.cli.bench import bench_app
from gpuplex.cli.gateway import gateway_command
from gpuplex.cli.help_pages import command_group
from gpuplex.cli.host import host_app
from gpuplex.cli.jobs import job_app
from gpuplex.cli.keys import keys_app
from gpuplex.cli.kube import kube_app
from gpuplex.cli.login import login_command
from gpuplex.cli.queues import queues_command
from gpuplex.cli.server import server_command, token_app
from gpuplex.cli.sim import sim_app
from gpuplex.cli.simulate import simulate_command
from gpuplex.cli.statement import statement_command
from gpuplex.cli.store import store_app
from gpuplex.cli.up import up_command
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.core.target import Target
from gpuplex.errors import GpuplexError, NotFoundError

if TYPE_CHECKING:
    from gpuplex.core.plan import Plan
    from gpuplex.core.spec import GpuplexSpec

# Every command imports this module, and each imports what it runs in its own body: `--help`
# loads no spec, plan or store code, `validate` no store, server or renderer
# (tests/architecture/test_cli_imports.py).

app = command_group(
    "gpuplex: share GPUs between tenants safely, fairly and with the bill to match."
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version as package_version

        out.print(f"gpuplex {package_version('gpuplex')}", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """gpuplex: share GPUs between tenants safely, fairly and with the bill to match."""


app.add_typer(host_app, name="host")
app.add_typer(keys_app, name="keys")
app.add_typer(audit_app, name="audit")
app.add_typer(sim_app, name="sim")
app.add_typer(token_app, name="token")
app.add_typer(store_app, name="store")
app.add_typer(kube_app, name="kube")
app.add_typer(bench_app, name="bench")
app.add_typer(job_app, name="job")
app.command(name="gateway")(gateway_command)
app.command(name="server")(server_command)
app.command(name="up")(up_command)
app.command(name="simulate")(simulate_command)
app.command(name="queues")(queues_command)
app.command(name="statement")(statement_command)
app.command(name="login")(login_command)
out = stdout_console()
err = stderr_console()


class OutputFormat(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


SpecFile = Annotated[Path, typer.Argument(help="The gpuplex.yaml to read.", show_default=False)]
PlanTarget = Annotated[
    Target | None,
    typer.Option(
        help="Plan for the host runtime or for Kubernetes, where each node's full GPUs take one "
        "sharing method and MPS stays off nodes with MIG. Default: kubernetes when the spec has a "
        "`kubernetes:` section, else host.",
        show_default=False,
    ),
]


def offline_plan(spec: GpuplexSpec, current: Path | None, target: Target | None) -> Plan:
    """The plan `spec` would get, against the plan JSON `current` if given: a preview for
    `validate`, `plan` and `explain`, stored nowhere (an applied spec is planned where it is
    applied: server/spec_apply.py, host/session.py, `kube apply FILE`)."""
    from gpuplex.core.plan import make_plan
    from gpuplex.planfile import load_plan_file

    return make_plan(spec, load_plan_file(current) if current else None, target=target)


@app.command()
def validate(file: SpecFile) -> None:
    """Check a spec: shape, names, references, requests against the fleet and quotas."""
    from gpuplex.cli.spec_warnings import warn_port_clashes, warn_root_tenants, warn_spec_file
    from gpuplex.core.plural import counted
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(file)
    warn_root_tenants(spec)
    warn_spec_file(spec, file)
    warn_port_clashes(spec, offline_plan(spec, None, Target.HOST), file)
    workloads = sum(len(t.workloads) for t in spec.tenants)
    gpus = sum(g.count for n in spec.fleet.nodes for g in n.gpus)
    counts = ", ".join(
        (counted(len(spec.tenants), "tenant"), counted(workloads, "workload"), counted(gpus, "GPU"))
    )
    out.print(f"[green]valid[/]: {counts}")


@app.command()
def plan(
    file: SpecFile,
    current: Annotated[
        Path | None, typer.Option(help="A plan JSON to re-plan against: keep what still fits.")
    ] = None,
    output: Annotated[OutputFormat, typer.Option("--output", "-o")] = OutputFormat.TABLE,
    target: PlanTarget = None,
) -> None:
    """Decide isolation and placement for every replica, and print the plan."""
    from gpuplex.cli.render import (
        changes_table,
        gpu_map,
        placement_table,
        problems_table,
        summary_line,
    )
    from gpuplex.cli.spec_warnings import warn_port_clashes, warn_root_tenants, warn_spec_file
    from gpuplex.core.plan.node_sharing import target_of
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(file)
    warn_root_tenants(spec)
    warn_spec_file(spec, file)
    result = offline_plan(spec, current, target)
    if (target or target_of(spec)) is Target.HOST:
        warn_port_clashes(spec, result, file)
    if output is OutputFormat.JSON:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    elif output is OutputFormat.YAML:
        import yaml

        sys.stdout.write(yaml.safe_dump(result.model_dump(mode="json"), sort_keys=False))
    else:
        out.print(placement_table(result, spec.pricing))
        out.print(gpu_map(result))
        problems = problems_table(result)
        if problems is not None:
            out.print(problems)
        changes = changes_table(result)
        if changes is not None:
            out.print(changes)
        out.print(summary_line(result))


@app.command()
def explain(
    file: SpecFile,
    workload: Annotated[str, typer.Argument(help="tenant/workload, or a workload name if unique.")],
    current: Annotated[Path | None, typer.Option(help="A plan JSON to re-plan against.")] = None,
    target: PlanTarget = None,
    output: Annotated[
        OutputFormat,
        typer.Option(
            "--output", "-o", help="table: the sentences; json or yaml: also each placement."
        ),
    ] = OutputFormat.TABLE,
) -> None:
    """Why a workload gets this isolation mode and these GPUs, or why it is not placed; what
    each replica asked, got and costs."""
    from gpuplex.cli.render import explanation_document
    from gpuplex.core.plan.explain import explain as explain_workload
    from gpuplex.core.report.placement_cost import placement_cost
    from gpuplex.specfile import load_spec_file

    spec = load_spec_file(file)
    tenant_name, workload_name = _find_workload(spec, workload)
    result = offline_plan(spec, current, target)
    lines = explain_workload(
        spec,
        result,
        tenant_name,
        workload_name,
        target=target,
        cost=lambda p: placement_cost(p, result, spec.pricing).sentence(),
    )
    if output is OutputFormat.TABLE:
        for line in lines:
            out.print(line, highlight=False)
        return
    document = explanation_document(spec, result, tenant_name, workload_name, lines)
    if output is OutputFormat.JSON:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        import yaml

        sys.stdout.write(yaml.safe_dump(document, sort_keys=False))


@app.command()
def catalog(
    model: Annotated[
        str | None, typer.Argument(help="A GPU model: list its MIG profiles.", show_default=False)
    ] = None,
    spec: Annotated[
        Path | None,
        typer.Option(help="A gpuplex.yaml: list the models its fleet.gpu_models adds, too."),
    ] = None,
) -> None:
    """The GPU models a spec may name, or one model's MIG profiles and placements."""
    from gpuplex.cli.catalog_view import models_table, profiles_table
    from gpuplex.core.catalog import Catalog
    from gpuplex.core.spec.parse import did_you_mean
    from gpuplex.specfile import load_spec_file

    known = load_spec_file(spec).fleet.catalog if spec is not None else Catalog()
    if model is None:
        out.print(models_table(known.models))
        return
    found = known.model(model)
    if found is None:
        hint = did_you_mean(model, known.names())
        raise NotFoundError(
            f"unknown GPU model {model!r}{hint}; run `gpuplex catalog` for the list"
            + ("" if spec else " (with --spec FILE, the spec's fleet.gpu_models too)")
        )
    out.print(profiles_table(found))


@app.command()
def schema() -> None:
    """Print the JSON Schema of gpuplex.yaml (for editor completion)."""
    from gpuplex.core.spec import GpuplexSpec

    sys.stdout.write(json.dumps(GpuplexSpec.model_json_schema(), indent=2) + "\n")


def _find_workload(spec: GpuplexSpec, name: str) -> tuple[str, str]:
    tenant_part, _, workload_part = name.rpartition("/")
    matches = [
        (t.name, w.name)
        for t in spec.tenants
        for w in t.workloads
        if w.name == workload_part and tenant_part in ("", t.name)
    ]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(f"{t.name}/{w.name}" for t in spec.tenants for w in t.workloads)
    if matches:
        options = ", ".join(f"{t}/{w}" for t, w in matches)
        raise NotFoundError(f"{name!r} is in several tenants: write one of {options}")
    raise NotFoundError(f"no workload {name!r}; workloads: {known or 'none'}")


def app_for(args: Sequence[str]) -> typer.Typer:
    """The app as it runs `args`: where the first names a command or command group, the app with
    that one alone, so that typer builds the click command of what runs and not of all the
    others (about a tenth of `validate`'s start-up); else (no command, `--help`, `--version`, a
    misspelt name) the whole app, whose help page and suggestions list every command. Either way
    the named command parses, prints and fails as it does in the whole app."""
    name = args[0] if args else None
    commands = [info for info in app.registered_commands if _command_name(info) == name]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands = commands
    one.registered_groups = groups
    return one


def _command_name(info: CommandInfo) -> str | None:
    if info.name is not None:
        return info.name
    return get_command_name(info.callback.__name__) if info.callback is not None else None


#: The commands that read a spec or the catalog, print and exit. They run without Python's cyclic
#: garbage collector: its hundred-odd passes over the models pydantic builds while they start free
#: next to nothing and cost about 20 ms of the 0.35 s they may take (docs/benchmarks.md).
#: Every other command (servers, `up`, watches, replays, API calls) runs with it.
ONE_SHOT_COMMANDS = frozenset({"validate", "plan", "explain", "catalog", "schema"})


def needs_cycle_collector(args: Sequence[str]) -> bool:
    return not args or args[0] not in ONE_SHOT_COMMANDS


def run() -> None:
    """Entry point: run the app, turning gpuplex errors into a message and an exit code."""
    args = sys.argv[1:]
    if not needs_cycle_collector(args):
        gc.disable()
    try:
        app_for(args)()
    except GpuplexError as error:
        # escape: messages quote user input and field paths such as env[key], not markup
        err.print(f"[red]error[/]: {escape(error.message)}", highlight=False, soft_wrap=True)
        raise SystemExit(error.exit_code) from None
