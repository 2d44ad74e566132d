"""`gpuplex job submit|list|show|logs|cancel`: a tenant's jobs on the running control plane
(`/api/v1/tenants/{tenant}/jobs`), with `--server`/`--token` as `gpuplex statement` takes them.

A job comes from a YAML job file (a mistake is reported with file:line and the field) or from
flags (`--gpu-count 1 --command "python train.py"`). The tenant is `--tenant`, else the job file's,
else the token's own (a platform-admin token has none: give `--tenant`). `show`, `logs` and
`cancel` find a job by its id alone (`GET /jobs/{id}`), so a platform admin needs no `--tenant`
there. Errors are one line on
stderr with the error model's exit code (a bad job file exits 2, `job_invalid`)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuplex.cli.control_plane_options import ServerOption, TokenOption
from gpuplex.cli.conventions import reported
from gpuplex.cli.help_pages import command_group
from gpuplex.cli.job_view import JobOutputFormat, job_panel, jobs_table, logs_text, shown
from gpuplex.client.control_plane import ApiRefusal, ControlPlane
from gpuplex.consoles import stdout_console
from gpuplex.core.jobs.states import JobState
from gpuplex.errors import (
    ErrorCode,
    FieldPath,
    JobFileError,
    RequestRefused,
    SpecError,
    SpecProblem,
)
from gpuplex.settings import DEFAULT_SERVER_URL

if TYPE_CHECKING:
    from gpuplex.core.spec.jobs import JobSpec

out = stdout_console()
job_app = command_group(
    "Submit, list, show, cancel and read the logs of jobs on the running control plane."
)

TenantOption = Annotated[
    str | None,
    typer.Option("--tenant", help="The tenant.", show_default="the token's own tenant"),
]
JobIdArgument = Annotated[str, typer.Argument(help="The job's id (j + 8 hex digits).")]
OutputOption = Annotated[JobOutputFormat, typer.Option("--output", "-o", help="table or json.")]


@job_app.command("submit")
def submit_command(
    file: Annotated[
        Path | None, typer.Argument(help="A YAML job file.", show_default=False)
    ] = None,
    tenant: TenantOption = None,
    gpu_count: Annotated[int | None, typer.Option(help="Whole GPUs.")] = None,
    gpu_memory_gib: Annotated[float | None, typer.Option(help="A share: GPU memory.")] = None,
    compute_percent: Annotated[int | None, typer.Option(help="With a share: SM %.")] = None,
    mig_profile: Annotated[str | None, typer.Option(help="A MIG slice, e.g. 1g.10gb.")] = None,
    command: Annotated[str | None, typer.Option(help="The program and its arguments.")] = None,
    image: Annotated[str | None, typer.Option(help="A container image.")] = None,
    env: Annotated[list[str] | None, typer.Option(help="K=V; repeat for more.")] = None,
    priority: Annotated[int | None, typer.Option(help="Higher starts first.")] = None,
    max_runtime_s: Annotated[float | None, typer.Option(help="Stopped after this long.")] = None,
    name: Annotated[str | None, typer.Option(help="A name to find it by.")] = None,
    backoff_limit: Annotated[
        int | None, typer.Option(help="Retries after a failed attempt.", show_default="0")
    ] = None,
    backoff_initial_s: Annotated[
        float | None, typer.Option(help="Wait before the first retry.", show_default="10")
    ] = None,
    backoff_max_s: Annotated[
        float | None, typer.Option(help="Longest wait between retries.", show_default="360")
    ] = None,
    output: OutputOption = JobOutputFormat.TABLE,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """Queue a job: from a YAML job file, or from flags."""
    flags: dict[str, Any] = {
        "gpu": _gpu(gpu_count, gpu_memory_gib, compute_percent, mig_profile),
        "command": _command_words(command),
        "image": image,
        "env": _env(env or []),
        "priority": priority,
        "max_runtime_s": max_runtime_s,
        "name": name,
        "backoff_limit": backoff_limit,
        "backoff_initial_s": backoff_initial_s,
        "backoff_max_s": backoff_max_s,
    }
    given = {key: value for key, value in flags.items() if value is not None and value != {}}
    with reported():
        if file is not None and given:
            names = ", ".join(f"--{key.replace('_', '-')}" for key in given)
            raise RequestRefused(
                ErrorCode.INVALID_REQUEST,
                f"give a job file or flags, not both ({names}): put them in {file}",
            )
        api = ControlPlane.of(server, token)
        job = _from_file(file, tenant) if file is not None else _from_flags(given, tenant)
        owner = job.tenant if job.tenant != _TOKENS_TENANT else _own_tenant(api)
        body = job.model_dump(mode="json", exclude_defaults=True) | {"tenant": owner}
        try:
            reply = api.post_json(f"/tenants/{owner}/jobs", body)
        except ApiRefusal as refusal:
            if file is not None and refusal.code is ErrorCode.JOB_INVALID:
                _locate_in(file, refusal)
            raise
    if output is JobOutputFormat.JSON:
        sys.stdout.write(json.dumps(reply, indent=2) + "\n")
    else:
        out.print(
            f"[green]queued[/] {shown(reply['id'])} ({shown(owner)}): {shown(reply['reason'])}"
        )


@job_app.command("list")
def list_command(
    tenant: Annotated[
        str | None, typer.Argument(help="The tenant.", show_default="the token's own tenant")
    ] = None,
    state: Annotated[
        list[JobState] | None, typer.Option("--state", help="Only these states; repeatable.")
    ] = None,
    output: OutputOption = JobOutputFormat.TABLE,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """The tenant's jobs, newest first."""
    with reported():
        api = ControlPlane.of(server, token)
        owner = tenant or _own_tenant(api)
        query = [("state", s.value) for s in state or ()] + [("limit", "1000")]
        items = api.get_json_many(f"/tenants/{owner}/jobs", query)["items"]
    if output is JobOutputFormat.JSON:
        sys.stdout.write(json.dumps(items, indent=2) + "\n")
    else:
        out.print(jobs_table(owner, items))


@job_app.command("show")
def show_command(
    job_id: JobIdArgument,
    tenant: TenantOption = None,
    output: OutputOption = JobOutputFormat.TABLE,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """The job, its events, and for a queued job why it waits now."""
    with reported():
        api = ControlPlane.of(server, token)
        reply = api.get_json(f"/tenants/{tenant}/jobs/{job_id}" if tenant else f"/jobs/{job_id}")
    if output is JobOutputFormat.JSON:
        sys.stdout.write(json.dumps(reply, indent=2) + "\n")
    else:
        out.print(job_panel(reply))


@job_app.command("logs")
def logs_command(
    job_id: JobIdArgument,
    tenant: TenantOption = None,
    tail: Annotated[int, typer.Option(help="Last lines per stream.")] = 200,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """The last lines the job wrote (stdout, then stderr)."""
    with reported():
        api = ControlPlane.of(server, token)
        owner = tenant or _tenant_of_job(api, job_id)
        reply = api.get_json(f"/tenants/{owner}/jobs/{job_id}/logs", tail=str(tail))
    sys.stdout.write(logs_text(reply))


@job_app.command("cancel")
def cancel_command(
    job_id: JobIdArgument,
    tenant: TenantOption = None,
    server: ServerOption = DEFAULT_SERVER_URL,
    token: TokenOption = None,
) -> None:
    """Cancel a job: a queued one at once, a running one when the runner stops it."""
    with reported():
        api = ControlPlane.of(server, token)
        owner = tenant or _tenant_of_job(api, job_id)
        reply = api.post_json(f"/tenants/{owner}/jobs/{job_id}/cancel")
    out.print(f"{shown(reply['id'])}: {shown(reply['state'])} ({shown(reply['reason'])})")


def _from_file(
    path: Path,
    tenant: str | None,
    check: Callable[[object], JobSpec | list[SpecProblem]] | None = None,
) -> JobSpec:
    """The job file, every mistake with file:line and the field (a JobFileError)."""
    from gpuplex.specfile import load_yaml_file

    try:
        return load_yaml_file(path, check or (lambda data: _parsed(data, tenant)))
    except SpecError as error:
        raise JobFileError(error.source, error.problems) from None


#: Stands for "the token's tenant" while the job is checked, before the API is asked whose it is
#: (a valid DNS label, so the check passes; it never reaches the API).
_TOKENS_TENANT = "the-tokens-own-tenant"


def _locate_in(path: Path, refusal: ApiRefusal) -> None:
    """Raise the API's problems with the job as a JobFileError placing each in the file."""
    problems = [
        SpecProblem(field_path(str(p.get("field", ""))), str(p.get("message", "")))
        for p in refusal.detail.get("problems", [])
        if isinstance(p, dict)
    ]
    if problems:
        _from_file(path, None, lambda _: problems)


def field_path(dotted: str) -> FieldPath:
    """`gpu.count` or `env[0]` as a field path; `(document)` and `` as the top."""
    path: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", dotted):
        path.append(int(part[1:-1]) if part.startswith("[") else part)
    return () if path == ["(document)"] else tuple(path)


def _parsed(data: object, tenant: str | None) -> JobSpec | list[SpecProblem]:
    from gpuplex.core.spec.jobs import parse_job

    if tenant is None and isinstance(data, dict) and "tenant" not in data:
        return parse_job(data, _TOKENS_TENANT)
    return parse_job(data, tenant)


def _from_flags(given: dict[str, Any], tenant: str | None) -> JobSpec:
    from gpuplex.core.spec.jobs import parse_job

    problems_or_job = parse_job(given, tenant or _TOKENS_TENANT)
    if isinstance(problems_or_job, list):
        problems = [_as_flag(p) for p in problems_or_job]
        raise JobFileError("the flags", problems)
    return problems_or_job


def _as_flag(problem: SpecProblem) -> SpecProblem:
    flag = {"gpu": "--gpu-count/--gpu-memory-gib/--mig-profile", "command": "--command"}
    head = str(problem.path[0]) if problem.path else ""
    if head in flag:
        return SpecProblem((flag[head],), problem.message)
    return problem


def _gpu(
    count: int | None, memory_gib: float | None, compute: int | None, mig: str | None
) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "count": count,
        "memory_gib": memory_gib,
        "compute_percent": compute,
        "mig_profile": mig,
    }
    return {key: value for key, value in gpu.items() if value is not None}


def _command_words(command: str | None) -> list[str] | None:
    """`--command` split as a shell would; an unbalanced quote is one line on stderr, exit 2."""
    if command is None:
        return None
    with reported():
        try:
            return shlex.split(command)
        except ValueError as error:  # shlex's "No closing quotation" or "No escaped character"
            what = (
                "it ends with a backslash that escapes nothing"
                if "escaped" in str(error)
                else "a quote is not closed"
            )
            problem = SpecProblem(
                ("--command",),
                f"cannot split {command!r} as a shell would: {what}; balance its quotes (the "
                "shell takes one pair of quotes around the whole --command value)",
            )
            raise JobFileError("the flags", [problem]) from None


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r}: write K=V", param_hint="--env")
        env[key] = value
    return env


def _tenant_of_job(api: ControlPlane, job_id: str) -> str:
    """Whose the job is (`GET /jobs/{id}`: any tenant's for a platform admin, else only the
    token's own tenant's)."""
    return str(api.get_json(f"/jobs/{job_id}")["tenant"])


def _own_tenant(api: ControlPlane) -> str:
    me = api.get_json("/whoami")
    tenant = me.get("tenant")
    if not tenant:
        raise RequestRefused(
            ErrorCode.INVALID_REQUEST,
            "a platform-admin token has no tenant of its own: give --tenant",
        )
    return str(tenant)
