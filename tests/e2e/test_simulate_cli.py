"""`gpuplex simulate` end to end on a tiny trace written here: two nodes of two GPUs and four pods
of one whole GPU each, so that every policy fills the cluster (100 % allocated) once the inflated
demand has arrived. Checks the table, the CSV, the PNG and the refusals of bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpuplex.replay.placement import POLICY_NAMES
from tests.e2e.cli_runs import CliResult, run_in_process, run_subprocess

EXIT_BAD_INPUT = 2
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
NODES = """sn,cpu_milli,memory_mib,gpu,model
node-a,64000,262144,2,V100M16
node-b,64000,262144,2,V100M16
"""
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
)
PODS = POD_HEADER + "".join(
    f"pod-{i},4000,16384,1,1000,,LS,Running,{i},100000,{i}\n" for i in range(4)
)


@pytest.fixture
def trace(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    pods = tmp_path / "pods.csv"
    nodes.write_text(NODES, encoding="utf-8")
    pods.write_text(PODS, encoding="utf-8")
    return nodes, pods


def ok(result: CliResult) -> CliResult:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == 0, result.output
    return result


def refused(result: CliResult) -> CliResult:
    assert "Traceback" not in result.output, result.output
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    return result


def test_simulate_prints_the_table_and_writes_the_csv_and_the_png(
    trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no cell folds
    out = tmp_path / "out"
    nodes, pods = trace
    result = ok(
        run_subprocess("simulate", "--nodes", nodes, "--pods", pods, "--seeds", "2", "--out", out)
    )

    assert "GPU allocation ratio (%) by arrived GPU demand, mean over 2 seed(s)" in result.stdout
    for point in ("25%", "50%", "75%", "90%", "100%", "110%", "120%", "130%"):
        assert point in result.stdout
    table_lines = {line.split()[1]: line for line in result.stdout.splitlines() if "│" in line}
    for policy in POLICY_NAMES:
        # the cluster is full once the inflated demand has arrived, whatever the policy
        assert table_lines[policy].split("│")[-2].strip() == "100.00"

    with (out / "simulate.csv").open(encoding="utf-8", newline="") as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["policy", "arrived_percent", "mean", "min", "max"]
    assert [row["policy"] for row in rows] == [p for p in POLICY_NAMES for _ in range(131)]
    assert [int(row["arrived_percent"]) for row in rows[:131]] == list(range(131))
    for row in rows:
        low, mean, high = float(row["min"]), float(row["mean"]), float(row["max"])
        assert 0.0 <= low <= mean <= high <= 100.0, row
    for row in rows:
        if row["arrived_percent"] == "0":
            assert float(row["max"]) == 0.0, row
        if row["arrived_percent"] == "130":
            assert float(row["min"]) == 100.0, row

    png = (out / "simulate.png").read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    assert len(png) > len(PNG_SIGNATURE)
    assert str(out / "simulate.csv") in result.stderr


def test_simulate_writes_into_simulate_out_by_default_and_replays_only_the_asked_policies(
    trace: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    nodes, pods = trace
    chosen = POLICY_NAMES[-1]
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", chosen]
    result = run_in_process([*args, "--inflate", "1.0"], monkeypatch, capsys)

    assert result.exit_code == 0, result.output
    lines = (tmp_path / "simulate-out" / "simulate.csv").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + 101  # the header, then arrived 0..100 %
    assert {line.split(",")[0] for line in lines[1:]} == {chosen}
    assert (tmp_path / "simulate-out" / "simulate.png").read_bytes().startswith(PNG_SIGNATURE)
    row = next(line for line in result.stdout.splitlines() if chosen in line)
    assert row.split("│")[-2].strip() == "-"  # no replay reached 130 % with --inflate 1.0


@pytest.mark.parametrize("which", ["nodes", "pods"])
def test_a_bad_csv_is_refused_naming_the_file_and_line(
    trace: tuple[Path, Path],
    tmp_path: Path,
    which: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace
    bad = nodes if which == "nodes" else pods
    lines = bad.read_text(encoding="utf-8").splitlines()
    lines[2] = lines[2].replace("64000", "lots").replace("4000", "lots")  # line 3 of the file
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")

    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(tmp_path / "o")]
    result = refused(run_in_process(args, monkeypatch, capsys))

    assert result.stderr.startswith("error: ")
    assert f"{bad}:3" in result.stderr.replace("\n", "")
    assert not (tmp_path / "o").exists()


def test_an_unknown_policy_is_refused_naming_the_known_ones(
    trace: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "tetris"]
    result = refused(run_in_process([*args, "--out", str(tmp_path / "o")], monkeypatch, capsys))

    assert "unknown policy 'tetris'" in result.stderr
    for policy in POLICY_NAMES:
        assert policy in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra",
    [["--seeds", "0"], ["--inflate", "0"], ["--nodes", "missing.csv"]],
    ids=["no-seeds", "no-inflate", "missing-file"],
)
def test_bad_options_are_usage_errors(
    trace: tuple[Path, Path],
    extra: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    nodes, pods = trace
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), *extra]
    refused(run_in_process(args, monkeypatch, capsys))
    assert not (tmp_path / "simulate-out").exists()


def test_an_out_dir_that_cannot_be_made_is_refused_before_replaying(
    trace: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(blocker / "out")]
    result = refused(run_in_process(args, monkeypatch, capsys))
    assert "cannot create" in result.stderr


def test_a_cluster_without_gpus_is_refused(
    trace: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    nodes, pods = trace
    nodes.write_text(NODES.replace(",2,V100M16", ",0,"), encoding="utf-8")
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(tmp_path / "o")]
    result = refused(run_in_process(args, monkeypatch, capsys))
    assert f"{nodes}: no node has a GPU" in result.stderr.replace("\n", "")


# -- --compare-isolation ------------------------------------------------------------------------

#: shares of 300, 460 and 240 and one whole GPU: 2000 of the 4000 milli, so `--inflate 0.5`
#: replays exactly these four pods
SHARED_PODS = POD_HEADER + "".join(
    f"pod-{i},4000,16384,1,{milli},,LS,Running,{i},100000,{i}\n"
    for i, milli in enumerate((300, 460, 240, 1000))
)
ISOLATION_HEADER = (
    "mode,at,seeds,arrived_percent,gpus_in_use,gpus_needed,asked_percent,reserved_percent,"
    "stranded_memory_gpus,stranded_memory_percent,failed_pods,pods,gpus_needed_vs_dedicated"
)


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The cells of each table row, by its first cell."""
    rows = [line.split("│")[1:-1] for line in stdout.splitlines() if line.startswith("│")]
    return {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}


def test_compare_isolation_prints_each_mode_and_writes_isolation_csv(
    trace: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    nodes, pods = trace
    pods.write_text(SHARED_PODS, encoding="utf-8")
    out = tmp_path / "out"
    args: list[str | Path] = ["--nodes", nodes, "--pods", pods, "--inflate", "0.5", "--seeds", "2"]
    result = ok(run_subprocess("simulate", *args, "--out", out, "--compare-isolation"))

    assert "Isolation modes with best-fit on 4 GPUs, mean over 2 seed(s)" in result.stdout
    rows = table_rows(result.stdout)
    assert list(rows) == ["dedicated", "mig", "mps", "time-slice"]
    # in use, needed, x dedicated, asked %, reserved %, stranded GPUs, stranded %, failed, ...
    assert rows["dedicated"][:8] == [
        "4.0",
        "4.0",
        "1.000",
        "50.00",
        "100.00",
        "2.0",
        "50.00",
        "0.0",
    ]
    assert rows["mps"][3:7] == ["50.00", "50.00", "0.0", "0.00"]  # as asked: whole percents
    assert rows["time-slice"][4] == "56.25"  # 500 + 500 + 250 + 1000 of 4000
    assert rows["time-slice"][5] == "0.0"  # replicas set no memory apart
    assert "'if they could be partitioned like an A100'" in result.stdout
    assert "at most 48 clients a GPU" in result.stdout
    assert "whole replicas of 4 per GPU" in result.stdout
    assert not (out / "simulate.csv").exists()  # the policies were not compared

    lines = (out / "isolation.csv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == ISOLATION_HEADER
    assert [line.split(",")[:3] for line in lines[1:]] == [
        [mode, at, "2"]
        for mode in ("dedicated", "mig", "mps", "time-slice")
        for at in ("100%", "end")
    ]
    assert lines[1].split(",")[3:] == [
        "50.0000", "4.0000", "4.0000", "50.0000", "100.0000", "2.0000", "50.0000", "0.0000",
        "4.0000", "1.0000",
    ]  # fmt: skip
    assert str(out / "isolation.csv") in result.stderr


def test_compare_isolation_takes_the_first_policy_and_the_replicas(
    trace: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    nodes, pods = trace
    pods.write_text(SHARED_PODS, encoding="utf-8")
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--inflate", "0.5"]
    extra = ["--policy", "first-fit", "--policy", "random", "--time-slice-replicas", "10"]
    out = ["--out", str(tmp_path / "o")]
    result = run_in_process([*args, *extra, "--compare-isolation", *out], monkeypatch, capsys)

    assert result.exit_code == 0, result.output
    assert "Isolation modes with first-fit on 4 GPUs" in result.stdout
    assert "whole replicas of 10 per GPU" in result.stdout
    # 3 + 5 + 3 replicas of 10 and the whole GPU: 300 + 500 + 300 + 1000 of 4000
    assert table_rows(result.stdout)["time-slice"][4] == "52.50"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--compare-isolation", "--time-slice-replicas", "1"], "--time-slice-replicas"),
        (["--time-slice-replicas", "4"], "only applies with --compare-isolation"),
        (["--compare-isolation", "--policy", "tetris"], "unknown policy 'tetris'"),
    ],
    ids=["one-replica", "replicas-without-compare", "unknown-policy"],
)
def test_bad_isolation_options_are_refused(
    trace: tuple[Path, Path],
    extra: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    nodes, pods = trace
    args = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--out", str(tmp_path / "o")]
    result = refused(run_in_process([*args, *extra], monkeypatch, capsys))
    assert message in result.stderr
    assert not (tmp_path / "o").exists()


def test_the_help_names_every_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # one help line per option, names unbroken
    result = run_in_process(["simulate", "--help"], monkeypatch, capsys)
    assert result.exit_code == 0
    for name in POLICY_NAMES:
        assert f" {name}," in result.stdout or f" {name}." in result.stdout, name
