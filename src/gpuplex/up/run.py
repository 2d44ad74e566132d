"""`gpuplex up`: start the host runtime and the gateway as child processes, and the control plane
(API, dashboard, roll-ups, GPU sampling) in this process; print where to look; on Ctrl-C stop it
all, tenants included.

A child that dies meanwhile (killed, crashed) is started again with backoff, each time said on
stderr and as a host event (`child_restarted`); the tenants run on meanwhile and the host runtime
re-adopts them. Only a child that keeps crashing (children.RESTARTS) makes `up` give up and stop
everything. The jobs `up`'s stop ends are stopped by gpuplex itself: the next `up` queues each
again as a new attempt (`UP_STOPPED`)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import uvicorn
from rich.console import Console

from gpuplex.clock import SYSTEM_CLOCK, now_s, sleep_s, utc_now
from gpuplex.consoles import stderr_console
from gpuplex.core.access import Role
from gpuplex.core.serve.routes import route_table
from gpuplex.core.spec import GpuplexSpec, RateLimits
from gpuplex.errors import (
    GatewayError,
    GpuplexError,
    HostActionError,
    HostBusyError,
    NotFoundError,
)
from gpuplex.host import session
from gpuplex.host.driver import GpuDriver
from gpuplex.host.interpreter import reachable_by_others
from gpuplex.host.sim_driver import models_memory
from gpuplex.host.state import Event, StateDir
from gpuplex.host.wiring import open_driver
from gpuplex.http_client import call
from gpuplex.observe.metrics_token import metrics_token_sha256, new_metrics_token
from gpuplex.server.app import create_app
from gpuplex.server.context import ServerContext
from gpuplex.server.job_runner import JobRunner
from gpuplex.server.run import ROLLUP_WINDOW_S, Reconciler, apply_spec_file, http_options
from gpuplex.server.sample_intake import store_samples
from gpuplex.settings import (
    METRICS_TOKEN_VARIABLE,
    GpuplexHome,
    HostSettings,
    ServerSettings,
    UpSettings,
    take_metrics_token,
)
from gpuplex.specfile import load_spec_file
from gpuplex.store.db import open_store
from gpuplex.up import children, lifecycle, readiness
from gpuplex.up.banner import DemoKey, UpBanner, gpuplex_command, job_example, print_banner
from gpuplex.up.real_commands import real_workloads, refuse_what_cannot_start, simulated_driver
from gpuplex.up.sampler import Sampler
from gpuplex.up.simulate import runs_for_real, unknown_real

DEMO_NAME = "gpuplex up demo"
READY_TIMEOUT_S = 60.0
#: What a job stopped when `up` stops is told ended it (the next `up` queues it again).
UP_STOPPED = "`gpuplex up` stopped"
err = stderr_console()


def run_up(stop: lifecycle.StopSignals, settings: UpSettings, console: Console) -> None:
    """Refuse before changing anything when this state directory or a port is in use; then start
    everything, unwinding what was started if a stop signal or an error comes first."""
    spec = load_spec_file(settings.spec_path)
    unknown = unknown_real(spec, settings.real)
    if unknown:
        raise NotFoundError("--real: " + "; ".join(unknown))
    root = settings.state_dir.absolute()
    listeners = {
        "gateway": (spec.gateway.host, spec.gateway.port),
        "control plane": (settings.server_host, settings.server_port),
    }
    stop.checkpoint()
    lifecycle.refuse_if_running(root)  # another up here: say which, before the ports
    children.check_ports_free(listeners)
    root.mkdir(parents=True, exist_ok=True)  # the first change
    with lifecycle.instance_lock(root, listeners):
        supervisor = StateDir(root / "host").lock_holder() if (root / "host").is_dir() else None
        if supervisor is not None:
            raise HostBusyError(
                f"a gpuplex host runtime (pid {supervisor}) already supervises {root / 'host'}; "
                "nothing was changed: stop it first (gpuplex host down --state-dir "
                f"{root / 'host'}), or give this one another --state-dir"
            )
        with contextlib.ExitStack() as cleanup:
            _start_and_serve(spec, settings, root, console, stop, cleanup)


def _start_and_serve(
    spec: GpuplexSpec,
    settings: UpSettings,
    root: Path,
    console: Console,
    stop: lifecycle.StopSignals,
    cleanup: contextlib.ExitStack,
) -> None:
    for folder in ("logs", "host", "store", "gateway"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    run_as = children.unprivileged_user()
    if run_as is not None and not reachable_by_others(root):
        raise HostActionError(
            f"the state directory {root} is inside a folder that user {run_as.name}, who runs "
            "the gateway, cannot enter (a parent lacks o+x); choose another --state-dir, "
            "e.g. under /var/lib/gpuplex"
        )
    python, extra_env = children.python_command(run_as)  # refuses before any change, too
    stop.checkpoint()
    host_settings = HostSettings(state_dir=root / "host", driver=settings.driver)
    dirs = StateDir(host_settings.state_dir)
    dirs.create()
    store_url = GpuplexHome(root).store_url  # where the CLI finds it with GPUPLEX_HOME=root
    engine = open_store(store_url)
    cleanup.callback(engine.dispose)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK, ROLLUP_WINDOW_S)
    real = real_workloads(settings) if simulated_driver(settings.driver) else None
    # what the host runtime could not start, said before the spec is applied: a folder granted
    # in `reads` that a tenant's user cannot read, a command it cannot run
    refuse_what_cannot_start(ctx, spec, settings, host_settings, real)
    # planned once, here; the host runtime, the gateway and billing all read this revision
    apply_spec_file(ctx.spec_history, settings.spec_path, actor="gpuplex up")
    applied = ctx.current.get()
    assert applied is not None  # just applied, or applied before and unchanged
    node = applied.spec.fleet.nodes[0]
    # the first to open the simulated driver builds the simulated machine: with the plan's MIG GPUs
    # in MIG mode, as the host runtime would have built it
    mig_on = {p.gpu_indices[0] for p in applied.plan.placements if p.node == node.name and p.mig}
    opened = open_driver(host_settings, dirs, node, mig_on, models_memory(applied.plan))
    cleanup.callback(opened.driver.close)
    simulated = opened.driver.name == "sim"
    driver_name = "sim" if simulated else "nvml"
    own, stand_ins = runs_for_real(spec, real if simulated else None)

    # /metrics on both is read with this token ($GPUPLEX_METRICS_TOKEN, else a new one)
    metrics_token = take_metrics_token() or new_metrics_token()
    try:
        token_sha256 = metrics_token_sha256(metrics_token)
    except ValueError as error:
        raise GatewayError(f"{METRICS_TOKEN_VARIABLE}: {error}") from None
    banner = _demo_credentials(ctx, spec, settings, simulated, opened.note)
    banner = replace(
        banner,
        metrics_token=metrics_token,
        home=root,
        cli=gpuplex_command(),
        job_example=job_example(spec, banner.viewer_tenant),
        real_commands=tuple(own) if simulated else (),
        stand_ins=tuple(stand_ins) if simulated else (),
    )

    (root / "store").chmod(0o700)  # specs, usage and webhook URLs: the owner's only
    if run_as is not None:
        _hand_over(root / "store", run_as)
        _hand_over(root / "gateway", run_as)
        if run_as.name == "nobody":
            err.print(
                "[yellow]note[/]: the gateway runs as nobody and owns the SQLite store, which "
                "other services running as nobody could then read and change; create a "
                "`gpuplex` system user (useradd --system gpuplex) and it runs as that instead"
            )
    stop.checkpoint()
    host_argv = [sys.executable, "-m", "gpuplex.cli", "host", "run", "--follow-store", store_url]
    host_argv += ["--state-dir", str(dirs.root), "--driver", driver_name]
    if simulated and real is not None:  # None: every command runs for real
        host_argv.append("--stand-ins")
        for name in real:
            host_argv += ["--real", name]
    gateway_argv = [*python, "gateway", "--store", store_url]  # it follows the applied revision
    gateway_argv += ["--spool-dir", str(root / "gateway" / "spool")]
    lifeline = lifecycle.child_environment()
    cleanup.callback(_bring_down, host_settings)  # last: the tenants, once the rest is stopped
    started: list[children.Child] = []
    cleanup.callback(children.stop, started)
    started.append(children.start("host", host_argv, root / "logs", lifeline=lifeline))
    started.append(
        children.start(
            "gateway",
            gateway_argv,
            root / "logs",
            extra_env | {METRICS_TOKEN_VARIABLE: metrics_token},
            run_as,
            lifeline=lifeline,
        )
    )
    server_settings = ServerSettings(
        store_url=store_url,
        listen_host=settings.server_host,
        listen_port=settings.server_port,
        rollup_interval_s=settings.rollup_interval_s,
        metrics_token_sha256=token_sha256,
    )
    threads = _background(ctx, server_settings, dirs, opened.driver, node.name, settings)
    cleanup.callback(_stop_threads, threads)
    server, server_thread = _start_server(ctx, server_settings)
    cleanup.callback(_stop_server, server, server_thread)
    cleanup.callback(err.print, "stopping: server, gateway, host runtime and tenants ...")
    _wait_all(started, banner, server_thread, stop)
    backends = len(route_table(spec, spec.gateway.backend_host, spec.gateway.backends).backends)
    starting = readiness.wait_for_model_servers(
        banner.gateway_url, metrics_token, backends, stop.event, err, READY_TIMEOUT_S
    )
    stop.checkpoint()
    print_banner(console, banner)
    if starting:
        err.print(
            f"[yellow]still starting[/]: {', '.join(starting)}: requests to their models get "
            "503 until they answer (see their logs under the state directory)"
        )
    if settings.check:
        _check_request(banner, console)
    else:
        _watch(started, stop, dirs)


def _bring_down(host_settings: HostSettings) -> None:
    # the tenant users this up made go with it (they come back on the next up)
    stopped = session.down(host_settings, forget_users=True, reason=UP_STOPPED)
    for line in stopped.left:
        err.print(f"[red]still running[/]: {line}", highlight=False)


def _stop_threads(threads: list[Reconciler | Sampler | JobRunner]) -> None:
    for thread in threads:
        thread.stopping.set()


def _stop_server(server: uvicorn.Server, thread: threading.Thread) -> None:
    server.should_exit = True
    thread.join(timeout=10)


def _demo_credentials(
    ctx: ServerContext, spec: GpuplexSpec, settings: UpSettings, simulated: bool, note: str | None
) -> UpBanner:
    """Fresh demo tokens and keys; the previous run's are revoked, so only these work."""
    now = utc_now()
    for token in ctx.tokens.list():
        if token.name.startswith(DEMO_NAME) and token.revoked_at is None:
            ctx.tokens.revoke(token.prefix, now, "gpuplex up")
    for key in ctx.keys.list():
        if key.name == DEMO_NAME and key.revoked_at is None:
            ctx.keys.revoke(key.prefix, now, "gpuplex up")
    admin, _ = ctx.tokens.create(
        name=f"{DEMO_NAME} admin", role=Role.PLATFORM_ADMIN.value, tenant=None,
        expires_at=None, now=now, actor="gpuplex up",
    )  # fmt: skip
    routes = route_table(spec, spec.gateway.backend_host, spec.gateway.backends)
    keys = []
    for tenant in spec.tenants:
        models = tuple(routes.models_of(tenant.name))
        if not models:
            continue
        secret, _ = ctx.keys.create(
            tenant.name, DEMO_NAME, [], None, RateLimits(), now, actor="gpuplex up"
        )
        keys.append(DemoKey(tenant.name, models, secret))
    viewer_tenant = keys[0].tenant if keys else None
    viewer = None
    if viewer_tenant is not None:
        viewer, _ = ctx.tokens.create(
            name=f"{DEMO_NAME} viewer", role=Role.TENANT_VIEWER.value, tenant=viewer_tenant,
            expires_at=None, now=now, actor="gpuplex up",
        )  # fmt: skip
    gpus = sum(g.count for n in spec.fleet.nodes for g in n.gpus)
    how = f"{gpus} simulated GPUs ({note or 'simulated driver'})" if simulated else "real GPUs"
    gateway = spec.gateway
    return UpBanner(
        how=how,
        server_url=f"http://{settings.server_host}:{settings.server_port}",
        gateway_url=f"http://{gateway.host}:{gateway.port}",
        admin_token=admin,
        viewer_tenant=viewer_tenant,
        viewer_token=viewer,
        keys=keys,
    )


def _hand_over(folder: Path, run_as: children.RunAs) -> None:
    """As root: the gateway's user owns the store and its own folder (SQLite, when root writes
    to a database owned by another user, gives its journal files that user too)."""
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, run_as.uid, run_as.gid)


def _background(
    ctx: ServerContext,
    server_settings: ServerSettings,
    dirs: StateDir,
    driver: GpuDriver,
    node: str,
    settings: UpSettings,
) -> list[Reconciler | Sampler | JobRunner]:
    threads: list[Reconciler | Sampler | JobRunner] = [
        Reconciler(ctx, server_settings),
        JobRunner(ctx, server_settings.jobs_interval_s),
        Sampler(
            dirs,
            driver,
            node,
            functools.partial(store_samples, ctx),
            ctx.clock,
            settings.sample_interval_s,
        ),
    ]
    for thread in threads:
        thread.start()
    return threads


def _start_server(
    ctx: ServerContext, settings: ServerSettings
) -> tuple[uvicorn.Server, threading.Thread]:
    config = uvicorn.Config(
        create_app(ctx, settings.metrics_from, settings.metrics_token_sha256),
        host=settings.listen_host,
        port=settings.listen_port,
        log_level="warning",
        access_log=False,
        **http_options(),
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gpuplex-server", daemon=True)
    thread.start()
    return server, thread


def _wait_all(
    started: list[children.Child],
    banner: UpBanner,
    server: threading.Thread,
    stop: lifecycle.StopSignals,
) -> None:
    host, gateway = started

    def going(alive: Callable[[], bool]) -> Callable[[], bool]:
        return lambda: alive() and not stop.event.is_set()

    gateway_up = children.wait_ready(
        f"{banner.gateway_url}/health", going(gateway.alive), READY_TIMEOUT_S
    )
    stop.checkpoint()
    if not gateway_up:
        raise HostActionError(
            f"the gateway did not start; its log ({gateway.log_path}) ends:\n{gateway.last_lines()}"
        )
    if not host.alive():
        raise HostActionError(
            f"the host runtime stopped; its log ({host.log_path}) ends:\n{host.last_lines()}"
        )
    server_up = children.wait_ready(
        f"{banner.server_url}/healthz", going(server.is_alive), READY_TIMEOUT_S
    )
    stop.checkpoint()
    if not server_up:
        raise HostActionError(
            f"the control plane did not start on {banner.server_url}: is the port free?"
        )


def _watch(started: list[children.Child], stop: lifecycle.StopSignals, dirs: StateDir) -> None:
    """Until a stop signal: start a child that died again, after its backoff; return (and so
    stop everything) only when one keeps crashing."""
    crashes = {child.name: children.Crashes([]) for child in started}
    due: dict[int, float] = {}  # index in `started` -> when it starts again
    while not stop.event.wait(0.5):
        for index, child in enumerate(started):
            if index in due:
                if now_s() >= due[index]:
                    del due[index]
                    started[index] = _restarted(child, dirs)
                continue
            if child.alive():
                continue
            err.print(
                f"[red]the {_name(child)} stopped[/] ({_how(child)}); its log ({child.log_path}) "
                "ends:"
            )
            err.print(child.last_lines(), markup=False)
            delay = crashes[child.name].after_crash(now_s())
            if delay is None:
                window = children.RESTARTS.window_s
                err.print(
                    f"[red]the {_name(child)} stopped {len(crashes[child.name].at_s)} times in "
                    f"{window:g} s[/]: not starting it again; stopping everything"
                )
                return
            err.print(f"starting the {_name(child)} again in {delay:g} s", highlight=False)
            due[index] = now_s() + delay


def _restarted(child: children.Child, dirs: StateDir) -> children.Child:
    again = children.restart(child)
    message = (
        f"the {_name(child)} stopped ({_how(child)}); started again as pid {again.process.pid}"
    )
    err.print(f"[yellow]{message}[/]", highlight=False)
    dirs.append_event(
        Event(at=utc_now(), kind="child_restarted", target=f"up/{child.name}", message=message)
    )
    return again


def _name(child: children.Child) -> str:
    return "host runtime" if child.name == "host" else child.name


def _how(child: children.Child) -> str:
    code = child.process.returncode
    if code is None:
        return "still running"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _check_request(banner: UpBanner, console: Console) -> None:
    """One chat completion through the gateway, as a tenant would send it."""
    if not banner.keys:
        raise GpuplexError("the spec serves no model: nothing to send a request to")
    key = banner.keys[0]
    body = json.dumps(
        {"model": key.models[0], "messages": [{"role": "user", "content": "Hello!"}]}
    ).encode()
    headers = {"authorization": f"Bearer {key.key}", "content-type": "application/json"}
    chat_url = f"{banner.gateway_url}/v1/chat/completions"  # loopback, our own gateway
    deadline = now_s() + READY_TIMEOUT_S
    last_error = "no attempt"
    while True:
        try:
            reply = call("POST", chat_url, headers=headers, body=body, timeout_s=10)
        except OSError as error:  # its model servers may still be starting
            last_error = str(error)
        else:
            if reply.ok:
                answer = json.loads(reply.body)
                break
            last_error = f"{reply.status}: {reply.body[:200].decode(errors='replace')}"
        if now_s() > deadline:
            raise HostActionError(
                f"no answer from {key.models[0]} through the gateway in "
                f"{READY_TIMEOUT_S:g} s ({last_error}); see the logs under the state directory"
            ) from None
        sleep_s(0.5)
    console.print(
        f"check: {key.tenant}'s {key.models[0]} answered through the gateway: "
        f"{answer['usage']['total_tokens']} tokens",
        highlight=False,
    )
