"""Jobs benchmark: admission decisions per second, the dynamic openb replay through the queues, and
what a user gets end to end (REST submit to a process running on a simulated host).

    .venv/bin/python bench/jobs.py [--data ../shared/data/openb] [--skip-replay] [--skip-admission]
                                   [--skip-end-to-end | --end-to-end-only] [--e2e-jobs 200]
                                   [--against REF [--rounds 1]]

(i) Admission throughput: 10,000 queued jobs of ~100 tenants (10 organisations x 10 tenants, each
with a guarantee; asks of 0.5, 1, 2 and 4 GPUs) over 1,000 synthetic nodes of 8 GPUs. Rounds of
`admit_ordered` run until every job has started; between rounds a tenth of the running jobs
(oldest first) leave. Measured: the engine alone, and the engine plus placing each admitted job
with best-fit and fgd-balanced on the 1,000 nodes (`ClusterState.place`/`remove`). Printed with
the anchor (Kueue: a few tens of admissions/s, taken as 30/s) and the ratio to it.

(ii) The dynamic openb replay (`gpuplex simulate --arrivals trace`): the default pod list over every
20th openb GPU node (314 GPUs), arrivals 50x faster than the trace (durations kept), tenants of
bench/jobs_tenants.yaml; queue rules vs FIFO with best-fit, and fgd-balanced vs best-fit with the
queue rules, each with its baseline from the same run and the ratio. Recorded in docs/benchmarks.md.

(iii) End to end (bench/jobs_end_to_end.py): `gpuplex up` on simulated GPUs, N jobs submitted
through the REST API: submits/s, jobs/s reaching `running`, submit-to-start p50/p95; against the
same flow with the intervals at their floor and the same processes started without the queue (and
with --against REF, REF's flows in the same run). Then one table puts the engine-only figure (i)
and the end-to-end figures side by side, each against its baseline.
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import os
import time

import numpy as np
from rich.console import Console

from bench import jobs_end_to_end
from bench.jobs_e2e_report import EngineFigure, print_summary
from bench.planner_measure import machine
from gpuplex.core.queues.admission import Holding, QueuedJob, admit_ordered, queue_order
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.core.trace import Choice, ClusterState, TraceNode, TracePod, choose, policy_named
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.jobs_report import tenant_rows, timeline
from gpuplex.replay.openb import load_nodes, load_timed_pods
from gpuplex.replay.tenants_file import parse_tenants_file
from gpuplex.specfile import load_yaml_file

KUEUE_ANCHOR_PER_S = 30.0
ASKS = (500, 1000, 2000, 4000)  # milli-GPUs
HERE = Path(__file__).resolve().parent


def synthetic_tree(gpus: float) -> QueueTree:
    orgs = []
    for o in range(10):
        tenants = tuple(
            QueueNode(f"t{o}-{t}", "tenant", {GPUS: gpus / 200}, weight=1 + t % 3)
            for t in range(10)
        )
        team = QueueNode(f"team{o}", "team", {GPUS: gpus / 20}, children=tenants)
        orgs.append(QueueNode(f"org{o}", "organisation", {GPUS: gpus / 20}, children=(team,)))
    cap = {GPUS: gpus}
    return QueueTree.of(QueueNode("cluster", "cluster", cap, cap, children=tuple(orgs)), cap)


def admission_rate(
    placement: str | None, jobs: int = 10_000, nodes: int = 1_000
) -> tuple[float, int, int, float]:
    """(admissions per second, admissions, rounds, seconds) over rounds until all jobs started."""
    rng = np.random.default_rng(1)
    trace_nodes = [TraceNode(f"n{i}", 128_000, 1 << 20, 8, "A100") for i in range(nodes)]
    tree = synthetic_tree(8.0 * nodes)
    pods = {
        str(i): TracePod(
            str(i), 1_000, 1_024, m // 1000 if m >= 1000 else 1, m if m < 1000 else 1000
        )
        for i, m in enumerate(rng.choice(ASKS, size=jobs))
    }
    names = tree.tenant_names()
    queues: dict[str, list[QueuedJob]] = {}
    tenant_of: dict[str, str] = {}
    for i, pod in pods.items():
        tenant = names[int(rng.integers(len(names)))]
        job = QueuedJob(i, tenant, {GPUS: pod.total_gpu_milli / 1000}, 0, float(i))
        queues.setdefault(tenant, []).append(job)
        tenant_of[i] = tenant
    for q in queues.values():
        q.sort(key=queue_order)
    state = ClusterState.empty(trace_nodes)
    policy = policy_named(placement, list(pods.values()), pods_leave=True) if placement else None
    holdings: dict[str, Holding] = {}
    where: dict[str, Choice] = {}
    admitted = rounds = 0
    spent = 0.0
    now = 0.0
    while any(queues.values()):
        now += 1.0
        started = time.perf_counter()
        decision = admit_ordered(tree, list(holdings.values()), queues, now)
        done: set[str] = set()
        for job_id in decision.admitted:
            if policy is not None:
                choice = choose(state, pods[job_id], policy, rng)
                if choice is None:
                    continue
                state.place(choice.node, pods[job_id], choice.gpus)
                where[job_id] = choice
            ask = {GPUS: pods[job_id].total_gpu_milli / 1000}
            holdings[job_id] = Holding(job_id, tenant_of[job_id], ask, 0, now)
            done.add(job_id)
        for tenant in {tenant_of[j] for j in done}:
            queues[tenant] = [j for j in queues[tenant] if j.id not in done]
        spent += time.perf_counter() - started
        admitted += len(done)
        rounds += 1
        for job_id in list(holdings)[: max(1, len(holdings) // 10)]:  # the oldest tenth leaves
            del holdings[job_id]
            if job_id in where:
                choice = where.pop(job_id)
                state.remove(choice.node, pods[job_id], choice.gpus)
    return admitted / spent, admitted, rounds, spent


def replay_runs(data: Path, speedup: float, seed: int) -> None:
    nodes = load_nodes(data / "openb_node_list_gpu_node.csv")[::20]
    pods = load_timed_pods(data / "openb_pod_list_default.csv")
    tenants = load_yaml_file(HERE / "jobs_tenants.yaml", parse_tenants_file)
    owners = tenants.assign([p.pod.name for p in pods], np.random.default_rng(seed))
    gpus = float(sum(n.gpus for n in nodes))
    tree = tenants.tree({GPUS: gpus})
    print(
        f"\n(ii) openb default, {len(pods)} pods on {len(nodes)} nodes ({gpus:.0f} GPUs), "
        f"arrivals {speedup:g}x faster, seed {seed}"
    )
    runs = {}
    for rules, policy in ((tree, "best-fit"), (None, "best-fit"), (tree, "fgd-balanced")):
        started = time.perf_counter()
        result = replay_jobs(
            nodes, pods, owners, tree=rules, policy=policy, seed=seed, speedup=speedup
        )
        line = timeline(result, tree)
        rows = tenant_rows(result, line)
        delays = [d for r in result.records if (d := r.delay_s) is not None]
        runs[line.run] = {
            "p50": float(np.percentile(delays, 50)),
            "p99": float(np.percentile(delays, 99)),
            "jain": line.mean_jain,
            "jain_wait": line.mean_jain_contended,
            "gpus": sum(r.mean_gpus for r in rows),
            "preempt": float(sum(r.preemptions for r in rows)),
            "secs": time.perf_counter() - started,
        }
        print(f"  {line.run}: {runs[line.run]['secs']:.1f} s")
        for r in rows:
            print(
                f"    {r.tenant:6} p50 {r.delay_p50_s or 0:8.0f} s  p99 {r.delay_p99_s or 0:8.0f} s  "
                f"GPUs {r.mean_gpus:6.1f} (fair {r.mean_fair_gpus:6.1f})  preemptions {r.preemptions}"
            )
    for label, base, other in (
        ("queue rules vs FIFO (best-fit)", "fifo + best-fit", "queues + best-fit"),
        ("fgd-balanced vs best-fit (queue rules)", "queues + best-fit", "queues + fgd-balanced"),
    ):
        print(f"  {label}: baseline {base}")
        for key, name in (
            ("p50", "delay p50 s (all pods)"),
            ("p99", "delay p99 s (all pods)"),
            ("jain", "mean Jain index"),
            ("jain_wait", "mean Jain while pods wait"),
            ("gpus", "mean GPUs allocated"),
            ("preempt", "preemptions"),
        ):
            b, o = runs[base][key], runs[other][key]
            ratio = f"{o / b:.3f}" if b else "-"
            print(f"    {name:26} {b:10.3f} -> {o:10.3f}  ratio {ratio}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/openb"))
    parser.add_argument("--speedup", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--skip-admission", action="store_true")
    parser.add_argument("--skip-end-to-end", action="store_true", help="(i) and (ii) only")
    parser.add_argument("--end-to-end-only", action="store_true", help="(iii) only")
    jobs_end_to_end.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.skip_end_to_end and args.end_to_end_only:
        parser.error("--skip-end-to-end or --end-to-end-only, not both")
    end_to_end_options = jobs_end_to_end.options_from(args, parser)
    load_average = " ".join(f"{n:.2f}" for n in os.getloadavg())
    engine = None
    if not args.skip_admission and not args.end_to_end_only:
        print(
            "(i) admission: 10,000 queued jobs, 100 tenants, 1,000 nodes x 8 GPUs; "
            f"anchor Kueue ~{KUEUE_ANCHOR_PER_S:g} admissions/s"
        )
        for placement in (None, "best-fit", "fgd-balanced"):
            rate, admitted, rounds, spent = admission_rate(placement)
            label = "engine alone" if placement is None else f"engine + {placement} placement"
            if placement is None:
                engine = EngineFigure(rate, KUEUE_ANCHOR_PER_S)
            print(
                f"  {label:34} {rate:10.0f} admissions/s  ({admitted} in {rounds} rounds, "
                f"{spent:.2f} s)  x{rate / KUEUE_ANCHOR_PER_S:.0f} the anchor"
            )
    if not args.skip_replay and not args.end_to_end_only:
        replay_runs(args.data, args.speedup, args.seed)
    end_to_end = None
    console = Console() if sys.stdout.isatty() else Console(width=200)
    if not args.skip_end_to_end:
        status = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=200)
        ran = jobs_end_to_end.run_section(end_to_end_options, console, status)
        if isinstance(ran, int):
            return ran
        end_to_end = ran
    if engine is not None or end_to_end is not None:
        print()
        print_summary(machine(), load_average, engine, end_to_end, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
