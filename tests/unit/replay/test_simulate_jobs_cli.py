"""`gpuplex simulate --arrivals trace` end to end on a tiny CSV: table, jobs.csv, jobs.png, and a
bad tenants file reported with its field path."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuplex.cli.main import app
from tests.unit.replay import rare_fleet

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100\nn1,64000,262144,2,V100\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    + "".join(f"b{i},1000,1024,1,1000,,LS,Running,0,100,0\n" for i in range(4))
    + "a0,1000,1024,1,500,,LS,Running,10,20,10\n"
    + "a1,1000,1024,1,1000,,LS,Running,11,,11\n"
)
TENANTS = """\
queues:
  preemption: {min_runtime_s: 0}
  organisations:
    - name: org
      teams:
        - name: team
          tenants:
            - {name: alice, guarantee: {gpus: 2}}
            - {name: bob}
assign:
  - {tenant: alice, pattern: "a*"}
  - {tenant: bob, share: 1}
"""


def write(tmp_path: Path, tenants: str) -> list[str]:
    (tmp_path / "nodes.csv").write_text(NODES)
    (tmp_path / "pods.csv").write_text(PODS)
    (tmp_path / "tenants.yaml").write_text(tenants)
    return [
        "simulate",
        "--arrivals",
        "trace",
        "--tenants",
        str(tmp_path / "tenants.yaml"),
        "--nodes",
        str(tmp_path / "nodes.csv"),
        "--pods",
        str(tmp_path / "pods.csv"),
        "--out",
        str(tmp_path / "out"),
    ]


def test_trace_arrivals_compares_queue_rules_fifo_and_policies(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, write(tmp_path, TENANTS))
    assert result.exit_code == 0, result.output
    assert "queues + best-fit" in result.output
    assert "fifo + best-fit" in result.output
    rows = (tmp_path / "out" / "jobs.csv").read_text().splitlines()
    assert rows[0].startswith("run,tenant,pods,started,delay_p50_s")
    by_run = {tuple(r.split(",")[:2]): r.split(",") for r in rows[1:]}
    assert set(by_run) == {
        (run, tenant)
        for run in ("queues + best-fit", "queues + fgd", "queues + fgd-balanced", "fifo + best-fit")
        for tenant in ("alice", "bob")
    }
    assert by_run[("queues + best-fit", "bob")][8] == "2"  # alice reclaimed its 2 GPUs
    assert by_run[("fifo + best-fit", "bob")][8] == "0"
    assert float(by_run[("fifo + best-fit", "alice")][5]) > 0  # alice waited behind bob
    assert (tmp_path / "out" / "jobs.png").read_bytes()[:4] == b"\x89PNG"
    # every policy level on this tiny trace: the first given, best-fit, is chosen
    assert "gpuplex's choice for this fleet: best-fit (first of those level on both)" in " ".join(
        result.output.split()
    )


def test_a_bad_tenants_file_names_the_field(tmp_path: Path) -> None:
    bad = TENANTS.replace("{tenant: bob, share: 1}", "{tenant: bobby, share: 1}")
    result = CliRunner().invoke(app, write(tmp_path, bad))
    assert result.exit_code != 0
    assert "assign[1].tenant" in result.output or "assign.1.tenant" in result.output, result.output


def test_trace_options_are_refused_without_arrivals_trace(tmp_path: Path) -> None:
    args = write(tmp_path, TENANTS)
    without_trace = args[:1] + args[3:]
    result = CliRunner().invoke(app, without_trace)
    assert result.exit_code == 2
    assert "only applies with --arrivals trace" in result.output
    no_tenants = args[:3] + args[5:]
    result = CliRunner().invoke(app, no_tenants)
    assert result.exit_code == 2
    assert "needs one" in result.output


def test_fgd_balanced_keeps_the_only_node_a_large_pod_fits_for_it(tmp_path: Path) -> None:
    """Through the CLI: under fgd-balanced bob's small pods go to the other node in use, leaving
    the one node alice's pod fits free, so it starts on arrival with no reclaim."""
    args = write(tmp_path, TENANTS.replace("guarantee: {gpus: 2}", "guarantee: {gpus: 0}"))
    (tmp_path / "nodes.csv").write_text(rare_fleet.NODES)
    (tmp_path / "pods.csv").write_text(rare_fleet.PODS)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = (tmp_path / "out" / "jobs.csv").read_text().splitlines()
    by_run = {tuple(r.split(",")[:2]): r.split(",") for r in rows[1:]}
    alice, bob = (
        by_run[("queues + fgd-balanced", "alice")],
        by_run[("queues + fgd-balanced", "bob")],
    )
    assert alice[3] == "1", rows  # started
    assert float(alice[4]) == 0.0, rows  # at once
    assert (bob[3], bob[8]) == ("5", "0"), rows  # bob's pods all run, none preempted
    # under best-fit and fgd alice's pod never starts: on this fleet gpuplex chooses fgd-balanced
    assert by_run[("queues + best-fit", "alice")][3] == "0", rows
    assert "gpuplex's choice for this fleet: fgd-balanced (fewest pods never started)" in " ".join(
        result.output.split()
    )
