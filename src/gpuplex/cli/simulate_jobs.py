"""`gpuplex simulate --arrivals trace`: the pods arrive and leave at the trace's times, through the
queue rules of a tenants file (`gpuplex.replay.tenants_file`), placed by a placement policy.

Runs: the queue rules with each --policy (default best-fit, fgd, fgd-balanced), and FIFO (one
queue in arrival order, no quotas) with the first policy. A table per tenant on stdout, and in
--out `jobs.csv` (per run and tenant) and `jobs.png` (GPUs per tenant over time against the fair
share, and Jain's index over time, one panel per run). Then the policy gpuplex chooses for this
fleet from the queue-rule runs (`gpuplex.replay.policy_choice`), with the line of gpuplex.yaml that
sets it for the scheduler extender.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from gpuplex.cli.conventions import reported
from gpuplex.consoles import stderr_console, stdout_console
from gpuplex.core.spec.quota_kinds import GPUS
from gpuplex.replay.jobs import replay_jobs
from gpuplex.replay.jobs_report import TenantRow, Timeline, csv_text, tenant_rows, timeline
from gpuplex.replay.openb import load_nodes, load_timed_pods
from gpuplex.replay.policy_choice import PolicyChoice, PolicyOutcome, choose_policy, outcome_of
from gpuplex.replay.tenants_file import parse_tenants_file
from gpuplex.specfile import load_yaml_file

out = stdout_console()
err = stderr_console()

DEFAULT_POLICIES = ("best-fit", "fgd", "fgd-balanced")


def simulate_trace_arrivals(
    nodes_csv: Path,
    pods_csv: Path,
    tenants_yaml: Path,
    *,
    policies: Sequence[str],
    seed: int,
    speedup: float,
    out_dir: Path,
) -> None:
    with reported():
        tenants = load_yaml_file(tenants_yaml, parse_tenants_file)
        nodes = load_nodes(nodes_csv)
        pods = load_timed_pods(pods_csv)
    owners = tenants.assign([p.pod.name for p in pods], np.random.default_rng(seed))
    capacity = float(sum(n.gpus for n in nodes))
    tree = tenants.tree({GPUS: capacity})
    chosen = list(policies) or list(DEFAULT_POLICIES)
    runs = [(tree, p) for p in chosen] + [(None, chosen[0])]
    rows: list[TenantRow] = []
    lines: list[Timeline] = []
    outcomes: list[PolicyOutcome] = []
    for rules, policy in runs:
        name = "queues" if rules is not None else "fifo"
        err.print(f"replaying {name} + {policy} ...", highlight=False)
        result = replay_jobs(
            nodes, pods, owners, tree=rules, policy=policy, seed=seed, speedup=speedup
        )
        line = timeline(result, tree)
        lines.append(line)
        rows += tenant_rows(result, line)
        if rules is not None:
            outcomes.append(outcome_of(result))
    out.print(jobs_table(rows, lines))
    choice = choose_policy(outcomes)
    out.print(choice_table(choice))
    out.print(
        f"gpuplex's choice for this fleet: {choice.policy} ({choice.reason}). The scheduler "
        f"extender places by it with `kubernetes: {{scheduler: {{policy: {choice.policy}}}}}` in "
        "gpuplex.yaml (docs/kubernetes.md).",
        highlight=False,
    )
    try:
        (out_dir / "jobs.csv").write_text(csv_text(rows, lines), encoding="utf-8")
        write_jobs_plot(lines, out_dir / "jobs.png")
    except OSError as error:
        raise typer.BadParameter(
            f"cannot write {error.filename or out_dir}: {error.strerror}", param_hint="--out"
        ) from None
    err.print(f"wrote {escape(str(out_dir / 'jobs.csv'))} and jobs.png", highlight=False)


def jobs_table(rows: Sequence[TenantRow], lines: Sequence[Timeline]) -> Table:
    jain = {line.run: (line.mean_jain, line.mean_jain_contended) for line in lines}
    table = Table(
        title=(
            "Jobs replay per run and tenant (Jain: the run's mean fairness index; "
            "(waiting): over the times some pod waited)"
        ),
        title_justify="left",
    )
    for header in ("run", "tenant", "pods", "started", "delay p50 s", "delay p99 s"):
        table.add_column(header, justify="left" if header in ("run", "tenant") else "right")
    for header in ("mean GPUs", "mean fair GPUs", "preemptions", "Jain", "Jain (waiting)"):
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(
            r.run,
            r.tenant,
            str(r.pods),
            str(r.started),
            "-" if r.delay_p50_s is None else f"{r.delay_p50_s:.0f}",
            "-" if r.delay_p99_s is None else f"{r.delay_p99_s:.0f}",
            f"{r.mean_gpus:.1f}",
            f"{r.mean_fair_gpus:.1f}",
            str(r.preemptions),
            f"{jain[r.run][0]:.3f}",
            f"{jain[r.run][1]:.3f}",
        )
    return table


def choice_table(choice: PolicyChoice) -> Table:
    chosen = next(o for o in choice.outcomes if o.policy == choice.policy)
    table = Table(
        title="Placement policies under the queue rules (gpuplex.replay.policy_choice)",
        title_justify="left",
    )
    table.add_column("policy")
    headers = ("never started", "longest wait s", "delay p99 s", "p99 / chosen", "mean GPUs")
    for header in (*headers, "GPUs / chosen"):
        table.add_column(header, justify="right")
    for o in choice.outcomes:
        table.add_row(
            o.policy + (" (chosen)" if o.policy == choice.policy else ""),
            str(o.never_started),
            f"{o.longest_delay_s:.0f}",
            f"{o.p99_delay_s:.0f}",
            _ratio(o.p99_delay_s, chosen.p99_delay_s),
            f"{o.mean_gpus:.1f}",
            _ratio(o.mean_gpus, chosen.mean_gpus),
        )
    return table


def _ratio(value: float, base: float) -> str:
    return f"{value / base:.3f}" if base > 0 else "-"


def write_jobs_plot(lines: Sequence[Timeline], path: Path) -> None:
    """Per run: GPUs per tenant (solid) against its fair share (dotted); Jain's index below."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6 * len(lines), 7), dpi=90)
    FigureCanvasAgg(figure)
    axes = figure.subplots(2, len(lines), squeeze=False, sharex="col")
    for column, line in enumerate(lines):
        top, bottom = axes[0][column], axes[1][column]
        hours = [t / 3600 for t in line.times_s]
        for index, tenant in enumerate(line.allocated):
            colour = f"C{index % 10}"
            top.plot(hours, line.allocated[tenant], color=colour, label=tenant)
            top.plot(hours, line.fair[tenant], color=colour, linestyle=":")
        top.set_title(f"{line.run}: GPUs (dotted: fair share)")
        top.set_ylabel("GPUs")
        top.legend(loc="upper left", fontsize="small")
        bottom.plot(hours, line.jain, color="black")
        bottom.set_ylim(0, 1.05)
        bottom.set_ylabel("Jain's fairness index")
        bottom.set_xlabel("hours (replay time)")
    figure.tight_layout()
    figure.savefig(path, format="png")
