"""Jobs benchmark, end to end: what a user gets from the queue, REST submit to a process running on
a simulated host, beside the engine-only figure of bench/jobs.py.

    .venv/bin/python bench/jobs.py --end-to-end-only [--e2e-jobs 200] [--against REF]
    .venv/bin/python bench/jobs_end_to_end.py [--e2e-jobs 200] [--e2e-lone 10]
                                              [--against REF [--rounds 1]] [--skip-floor]

Each flow starts its stack on a scratch state directory and free ports, and runs one warm-up job
to `running`. Then, through `POST /api/v1/tenants/{t}/jobs` with a platform-admin token (as
`gpuplex job submit` sends it), jobs of an MPS share (1 GiB, 2 % compute) running `sleep 3600`,
round robin over the tenants:
- lone jobs (--e2e-lone, 10): one at a time, each submitted once the one before runs, after a
  random pause of up to one runner interval (seeded; so that it comes at any point of the
  runner's cycle, as a user's would): what a user waits for a job on an idle queue;
- the flood (--e2e-jobs, 200): all of them, from --e2e-clients threads (4) as fast as they go;
  then it waits until every job's process has started and the control plane says `running`,
  reads each job's events, and stops the stack (tenants included).

The flows:
- `gpuplex up` on simulated GPUs, as a user runs it: the job runner's and the host runtime's
  intervals are the tree's defaults (2 s and 1 s today; `up` has no flag for them);
- the same with the intervals at the floor: `gpuplex server --jobs-interval-s 0.1` and
  `gpuplex host run --follow-store --interval 0.1`: what the queue costs apart from the waits
  between passes;
- the lower bound, the same processes on the same simulated host without the queue: the floor
  flow's stack, with one-replica workloads of the jobs' GPU share and command added to the
  applied spec (`POST /api/v1/spec/apply`) one at a time, then N in one revision, each timed from
  its apply request to its `started` event.

Measured per job, from the control plane's `submitted_at`: its `starting` event (admitted and
placed), the host runtime's `started` event for its process, and its `running` event (the control
plane saw the host's report); per flow, the p50/p95 of each wait, and for the flood submits/s
accepted and jobs/s (first submit to the last job running, or to the last process started). Each
figure is printed against its baseline of the same run: the lower bound; the floor flow for `up`;
and with `--against REF`, REF's queue flows (a temporary `git worktree`, its src/ first on the
path, on the same Python), each run back to back with the working tree's, in alternating order
per round. Everything it started is stopped on the way out, on Ctrl-C too; a stack that does not
start ends the run with its log's end and exit status 1. Results are in docs/benchmarks.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import os
import random
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tests.e2e.gateway.stack import free_port

from bench.gateway_procs import checkout, describe_ref, describe_working_tree
from bench.jobs_e2e_client import (
    JOB_COMMAND,
    JOB_GPU,
    Api,
    EventLog,
    JobTimes,
    MeasureError,
    Submitted,
    job_target,
    job_times,
    lone_job,
    submit_all,
    wait_running,
    wait_started,
)
from bench.jobs_e2e_report import FLOOR, HOST_ALONE, UP, EndToEnd, FlowRun, print_end_to_end
from bench.jobs_e2e_stack import Scratch, Source, Stack, StackError, probe, working_tree
from bench.planner_measure import machine
from gpuplex.clock import monotonic_s, now_s, sleep_s
from gpuplex.core.catalog.gpus import MPS_CLIENT_LIMIT

#: `gpuplex server --jobs-interval-s` takes no less; the host runtime's --interval is set alike
FLOOR_INTERVAL_S = 0.1
#: A tenant's caps unless `queues:` says otherwise (docs/configuration.md#queues)
DEFAULT_MAX_ACTIVE_JOBS = 1000
DEFAULT_MAX_SUBMITS_PER_MINUTE = 600
#: the lone jobs are named bench-10000 and on, the flood's bench-0 and on
LONE_FIRST = 10_000
#: Each lone job is sent after a pause of 0 to one runner interval, drawn from this seed: else
#: each would be sent just after the runner pass that saw the one before running, and wait a
#: whole interval for the next pass, where a user's job comes at any point of the cycle.
PAUSE_SEED = 1


@dataclass(frozen=True)
class Options:
    jobs: int = 200  # the flood
    lone: int = 10  # one at a time, before the flood
    tenants: int = 4
    gpus: int = 8
    clients: int = 4
    timeout_s: float = 300.0  # for the N jobs to run, per flow
    against: str | None = None
    rounds: int = 1
    skip_floor: bool = False


def tenant_names(options: Options) -> list[str]:
    return [f"tenant-{k}" for k in range(options.tenants)]


def bench_spec(options: Options, workloads: int = 0) -> dict[str, Any]:
    """The fleet, the tenants (MPS), their queues (no guarantees: every job borrows; the submit
    caps raised only where a tenant's share of the jobs would pass their defaults, so that a
    tree from before the caps can run it too) and `workloads` one-replica workloads, round
    robin."""
    names = tenant_names(options)
    tenants = []
    for k, name in enumerate(names):
        own = [
            {"name": f"w{i}", "gpu": JOB_GPU, "command": JOB_COMMAND}
            for i in range(k, workloads, len(names))
        ]
        tenants.append({"name": name, "isolation": "mps", "workloads": own})
    queues: dict[str, Any] = {
        "organisations": [
            {"name": "bench", "teams": [{"name": "all", "tenants": [{"name": n} for n in names]}]}
        ]
    }
    per_tenant = -(-(options.jobs + options.lone + 1) // options.tenants)
    if per_tenant >= min(DEFAULT_MAX_ACTIVE_JOBS, DEFAULT_MAX_SUBMITS_PER_MINUTE):
        queues |= {"max_active_jobs": 1_000_000, "max_submits_per_minute": 1_000_000}
    return {
        "version": 1,
        "fleet": {
            "nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": options.gpus}]}]
        },
        "tenants": tenants,
        "gateway": {"port": free_port()},
        "queues": queues,
    }


class Flows:
    """Runs the flows one stack at a time, with a progress display and a line per phase."""

    def __init__(self, options: Options, scratch: Scratch, progress: Progress) -> None:
        self.options = options
        self.scratch = scratch
        self.progress = progress
        self.task = progress.add_task("", total=None)

    def say(self, text: str, total: int | None = None) -> None:
        self.progress.update(self.task, description=text, total=total, completed=0)

    def line(self, text: str) -> None:
        self.progress.console.print(f"  {text}", highlight=False)

    def advance(self) -> None:
        self.progress.advance(self.task)

    def seen(self, count: int) -> None:
        self.progress.update(self.task, completed=count)

    def queue_flow(self, flow: str, source: Source, round_: int) -> FlowRun:
        """`gpuplex up` (UP) or server + host at the floor (FLOOR): a warm-up job, the lone jobs,
        then the flood, through the API."""
        label = f"{flow} · {source.name}"
        self.say(f"{label}: starting")
        began = monotonic_s()
        defaults = probe(source)
        if defaults.runner_interval_s is None:
            raise StackError(
                f"{label}: this tree has no job runner (no ServerSettings.jobs_interval_s): its "
                "`gpuplex up` runs no jobs to measure"
            )
        stack: Stack
        if flow == UP:
            stack = up = self.scratch.up(flow, source)
            up.start(bench_spec(self.options))
            runner_s, host_s = defaults.runner_interval_s, defaults.host_interval_s
        else:
            stack = both = self.scratch.server_host(flow, source)
            both.start(bench_spec(self.options), FLOOR_INTERVAL_S, FLOOR_INTERVAL_S)
            runner_s = host_s = FLOOR_INTERVAL_S
        start_s = monotonic_s() - began
        self.line(f"{label}: started in {start_s:.1f} s (runner {runner_s} s, host {host_s} s)")
        with Api(stack.url, stack.token) as api:
            log = EventLog(stack.events_path)
            lone = self.lone_jobs(api, log, label, runner_s or FLOOR_INTERVAL_S)
            submits, flood = self.flood(api, log, label)
        self.stop(label, stack)
        return FlowRun(flow, source.name, round_, runner_s, host_s, lone, flood, submits, start_s)

    def lone_jobs(self, api: Api, log: EventLog, label: str, runner_s: float) -> list[JobTimes]:
        o = self.options
        names = tenant_names(o)
        self.say(f"{label}: warm-up job")
        lone_job(api, log, -1, names[0], o.timeout_s)
        self.say(f"{label}: lone jobs", o.lone)
        lone = []
        pauses = random.Random(PAUSE_SEED)
        for k in range(o.lone):
            sleep_s(pauses.uniform(0, runner_s))
            lone.append(lone_job(api, log, LONE_FIRST + k, names[k % len(names)], o.timeout_s))
            self.advance()
        worst = max((t.running_s or t.submitted_s) - t.submitted_s for t in lone) if lone else 0.0
        self.line(
            f"{label}: {o.lone} lone jobs, the slowest running {worst:.1f} s after its submit"
        )
        return lone

    def flood(self, api: Api, log: EventLog, label: str) -> tuple[list[Submitted], list[JobTimes]]:
        o = self.options
        self.say(f"{label}: submitting the flood", o.jobs)
        submits = submit_all(api, tenant_names(o), o.jobs, o.clients, self.advance)
        refused = [s for s in submits if s.job_id is None]
        if refused:
            raise MeasureError(
                f"{label}: {len(refused)} of {o.jobs} submits refused, e.g. "
                f"{refused[0].status} {refused[0].error}"
            )
        span = max(s.replied_s for s in submits) - min(s.sent_s for s in submits)
        self.line(f"{label}: {o.jobs} jobs submitted in {span:.1f} s")
        jobs = {s.job_id: s.tenant for s in submits if s.job_id is not None}
        self.say(f"{label}: waiting for their processes", o.jobs)
        targets = [job_target(t, j) for j, t in jobs.items()]
        processes = wait_started(log, targets, o.timeout_s, self.seen)
        self.say(f"{label}: waiting for `running`", o.jobs)
        wait_running(api, jobs, o.timeout_s, self.seen)
        self.say(f"{label}: reading the jobs' events", o.jobs)
        flood = job_times(api, jobs, processes, self.advance)
        last = max(t.running_s or 0.0 for t in flood) - min(t.submitted_s for t in flood)
        self.line(f"{label}: all {o.jobs} running {last:.1f} s after the first submit")
        return submits, flood

    def host_alone(self) -> FlowRun:
        """The lower bound, on the floor flow's stack: one-replica workloads with the jobs' GPU
        share and command, added to the applied spec one at a time (the lone ones), then N in
        one revision (the flood), each timed from its apply request to its `started` event."""
        label = HOST_ALONE
        self.say(f"{label}: starting")
        began = monotonic_s()
        stack = self.scratch.server_host(label, working_tree())
        stack.start(bench_spec(self.options), FLOOR_INTERVAL_S, FLOOR_INTERVAL_S)
        start_s = monotonic_s() - began
        self.line(f"{label}: started in {start_s:.1f} s (host {FLOOR_INTERVAL_S} s)")
        with Api(stack.url, stack.token) as api:
            lone, flood = self.workloads(api, EventLog(stack.events_path), label)
        self.stop(label, stack)
        return FlowRun(label, "after", 0, None, FLOOR_INTERVAL_S, lone, flood, [], start_s)

    def workloads(
        self, api: Api, log: EventLog, label: str
    ) -> tuple[list[JobTimes], list[JobTimes]]:
        o = self.options
        names = tenant_names(o)
        spec = bench_spec(o)
        self.say(f"{label}: warm-up workload")
        self.add_workload(api, log, spec, names[0], "warm")
        self.say(f"{label}: lone workloads", o.lone)
        lone = []
        pauses = random.Random(PAUSE_SEED)
        for k in range(o.lone):
            sleep_s(pauses.uniform(0, FLOOR_INTERVAL_S))
            lone.append(self.add_workload(api, log, spec, names[k % len(names)], f"lone{k}"))
            self.advance()
        self.say(f"{label}: applying {o.jobs} workloads at once", o.jobs)
        flood_spec = bench_spec(o, o.jobs)
        for ours, theirs in zip(flood_spec["tenants"], spec["tenants"], strict=True):
            ours["workloads"] += theirs["workloads"]
        asked = now_s()
        apply(api, flood_spec)
        self.line(f"{label}: the apply request took {now_s() - asked:.2f} s (planning included)")
        targets = {f"{names[i % len(names)]}/w{i}#0": i for i in range(o.jobs)}
        started = wait_started(log, targets, o.timeout_s, self.seen)
        flood = [
            JobTimes(f"w{i}", target.split("/")[0], asked, None, started[target], None)
            for target, i in targets.items()
        ]
        last = max(started.values()) - asked
        self.line(f"{label}: all {o.jobs} processes started {last:.1f} s after the apply request")
        return lone, flood

    def add_workload(
        self, api: Api, log: EventLog, spec: dict[str, Any], tenant: str, name: str
    ) -> JobTimes:
        """`spec` with one more one-replica workload of `tenant`, applied; its times once its
        process started."""
        mine = next(t for t in spec["tenants"] if t["name"] == tenant)
        mine["workloads"].append({"name": name, "gpu": JOB_GPU, "command": JOB_COMMAND})
        asked = now_s()
        apply(api, spec)
        target = f"{tenant}/{name}#0"
        started = wait_started(log, [target], self.options.timeout_s, lambda _: None)
        return JobTimes(name, tenant, asked, None, started[target], None)

    def stop(self, label: str, stack: Stack) -> None:
        self.say(f"{label}: stopping")
        began = monotonic_s()
        self.scratch.stop(stack)
        self.line(f"{label}: stopped, tenants included, in {monotonic_s() - began:.1f} s")


def apply(api: Api, spec: dict[str, Any]) -> None:
    base = api.get("/spec")["revision"]
    reply = api.post("/spec/apply", {"spec_yaml": yaml.safe_dump(spec), "base_revision": base})
    if reply.status_code != 201:
        raise MeasureError(f"POST /spec/apply: {reply.status_code} {reply.text[:500]}")


def run(options: Options, status: Console) -> EndToEnd:
    """Every flow (and with --against, REF's too); raises StackError or MeasureError, with every
    process it started stopped and its scratch folder removed, and KeyboardInterrupt likewise."""
    load_average = " ".join(f"{n:.2f}" for n in os.getloadavg())
    trees = {"after": "the working tree"}
    settings: dict[str, object] = {
        "flood jobs": options.jobs,
        "lone jobs": options.lone,
        "tenants": options.tenants,
        "simulated GPUs": options.gpus,
        "submit clients": options.clients,
        "job": f"gpu {JOB_GPU}, command {' '.join(JOB_COMMAND)}",
    }
    flows = [UP] if options.skip_floor else [UP, FLOOR]
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    pair = [working_tree()]
    with contextlib.ExitStack() as later:  # left in reverse: stacks stopped, then the checkout
        if options.against is not None:
            trees = {
                "before": describe_ref(options.against),
                "after": describe_working_tree(options.against),
            }
            settings["rounds"] = options.rounds
            tree = later.enter_context(checkout(options.against))
            pair.insert(0, Source("before", trees["before"], tree))
        scratch = later.enter_context(Scratch())
        progress = later.enter_context(Progress(*columns, console=status, transient=True))
        runner = Flows(options, scratch, progress)
        runs = []
        for round_ in range(options.rounds):
            for k, flow in enumerate(flows):
                for source in pair if (round_ + k) % 2 == 0 else pair[::-1]:
                    runs.append(runner.queue_flow(flow, source, round_))
        runs.append(runner.host_alone())
    load_average += " → at end " + " ".join(f"{n:.2f}" for n in os.getloadavg())
    return EndToEnd(machine(), load_average, settings, trees, runs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = Options()
    add = parser.add_argument
    add("--e2e-jobs", type=int, default=defaults.jobs, help="jobs submitted per flow")
    add("--e2e-lone", type=int, default=defaults.lone, help="jobs submitted one at a time first")
    add("--e2e-tenants", type=int, default=defaults.tenants, help="tenants they go to")
    add("--e2e-gpus", type=int, default=defaults.gpus, help="simulated H100-80GB GPUs")
    add("--e2e-clients", type=int, default=defaults.clients, help="threads submitting")
    add("--e2e-timeout-s", type=float, default=defaults.timeout_s, help="for the jobs to run")
    add("--against", default=None, metavar="REF", help="also run REF's queue flows, same run")
    add("--rounds", type=int, default=None, help="with --against: rounds of both trees (1)")
    add("--skip-floor", action="store_true", help="only `gpuplex up` (and the lower bound)")


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Options:
    if args.rounds is not None and args.against is None:
        parser.error("--rounds goes with --against")
    options = Options(
        jobs=args.e2e_jobs,
        lone=args.e2e_lone,
        tenants=args.e2e_tenants,
        gpus=args.e2e_gpus,
        clients=args.e2e_clients,
        timeout_s=args.e2e_timeout_s,
        against=args.against,
        rounds=args.rounds or 1,
        skip_floor=args.skip_floor,
    )
    if min(options.jobs, options.tenants, options.gpus, options.clients, options.rounds) < 1:
        parser.error("--e2e-jobs, --e2e-tenants, --e2e-gpus, --e2e-clients and --rounds: >= 1")
    if options.lone < 0:
        parser.error("--e2e-lone: >= 0")
    held = options.jobs + options.lone + 1  # all run at once at the end, the warm-up one too
    if held > options.gpus * MPS_CLIENT_LIMIT:
        parser.error(
            f"{held} jobs (the flood, the lone ones and the warm-up one) do not fit at once on "
            f"{options.gpus} GPUs ({MPS_CLIENT_LIMIT} MPS clients each): give --e2e-gpus "
            f"{-(-held // MPS_CLIENT_LIMIT)} or more"
        )
    return options


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: leave through the same clean-up as Ctrl-C


def run_section(options: Options, console: Console, status: Console) -> EndToEnd | int:
    """The section as bench/jobs.py runs it: the result, or the exit status after a message."""
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        result = run(options, status)
    except KeyboardInterrupt:
        status.print("interrupted: every process this benchmark started is stopped")
        return 130
    except (StackError, MeasureError, RuntimeError) as error:
        status.print(f"[red]end to end: {escape(str(error))}[/]")
        status.print("every process this benchmark started is stopped")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_end_to_end(result, console)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_arguments(parser)
    options = options_from(parser.parse_args(argv), parser)
    console = Console() if sys.stdout.isatty() else Console(width=250)
    status = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=200)
    result = run_section(options, console, status)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
