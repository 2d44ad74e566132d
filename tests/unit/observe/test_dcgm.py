"""dcgm-exporter text -> GPU samples of tenant replicas: the fixtures are two nodes' `/metrics` in
the exporter's own format (its render template: gpu, UUID, pci_bus_id, device, modelName, the MIG
labels, Hostname, the driver version, then container/namespace/pod and vgpu). gpu-node-1 holds a
tenant on every GPU (two whole GPUs, two MIG instances, two time-sliced pods read with
--kubernetes-virtual-gpus); gpu-node-2 holds nothing of the tenants'."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from hypothesis import given, strategies as st
from typer.testing import CliRunner

from gpuplex.cli.server import server_command
from gpuplex.core.catalog import gpu_model
from gpuplex.core.meter import GpuSample
from gpuplex.errors import DcgmInputError
from gpuplex.observe.dcgm import (
    DcgmReading,
    gpu_model_of,
    mig_share,
    parse_exposition,
    utilization_percent,
)
from gpuplex.server.dcgm_attribution import attribute, workload_of_pod
from gpuplex.server.metrics.dcgm_metrics import DcgmScrapeStats
from gpuplex.settings import ServerSettings
from gpuplex.specfile import load_spec_text
from tests.unit.observe.dcgm_spec import SPEC_YAML

FIXTURES = Path(__file__).parent / "fixtures"
AT = datetime(2026, 3, 10, 12, 0, 10, tzinfo=UTC)
SPEC = load_spec_text(SPEC_YAML, source="test spec")
HEAD = '{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",Hostname="n1"'


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def series(metric: str, value: str, labels: str = "") -> str:
    return f"{metric}{HEAD}{labels}}} {value}\n"


def test_a_node_with_tenants_on_every_gpu_gives_one_sample_per_replica_and_gpu() -> None:
    readings = parse_exposition(fixture("gpu-node-1.txt"), source="gpu-node-1")
    got = attribute(readings, SPEC, AT)
    assert got.skipped == {}
    by_replica = {(s.tenant, s.workload, s.replica, s.gpu_index): s for s in got.samples}
    assert sorted(by_replica) == [
        ("acme", "train", 0, 0),
        ("acme", "train", 1, 1),
        ("globex", "chat", 0, 2),
        ("globex", "chat-large", 0, 2),
        ("initech", "playground", 0, 3),
        ("initech", "playground", 1, 3),
    ]
    train = by_replica["acme", "train", 0, 0]
    assert train == GpuSample(
        at=AT,
        node="gpu-node-1",
        gpu_index=0,
        tenant="acme",
        workload="train",
        replica=0,
        memory_used_mib=71234,
        utilization_percent=97.0,
        source="dcgm",
        gpu_uuid="GPU-5fd4c0de-9c1a-4e2f-8b3a-1d2e3f405162",
    )
    # MIG: GR_ENGINE_ACTIVE x the instance's compute slices / the GPU's 7
    chat = by_replica["globex", "chat", 0, 2]
    assert chat.memory_used_mib == 20480
    assert chat.utilization_percent == pytest.approx(30.0)
    large = by_replica["globex", "chat-large", 0, 2]
    assert large.utilization_percent == pytest.approx(0.5 * 4 / 7 * 100)
    # time-sliced with virtual GPUs: each pod's own processes
    first, second = (
        by_replica["initech", "playground", 0, 3],
        by_replica["initech", "playground", 1, 3],
    )
    assert (first.memory_used_mib, first.utilization_percent) == (12000, 35.0)
    assert (second.memory_used_mib, second.utilization_percent) == (9000, 20.0)


def test_readings_of_no_tenant_replica_are_skipped_and_counted_by_reason() -> None:
    got = attribute(parse_exposition(fixture("gpu-node-2.txt")), SPEC, AT)
    assert got.samples == []
    assert got.skipped == {"not_tenant_namespace": 1, "unknown_workload": 1, "no_pod": 2}
    assert got.examples["not_tenant_namespace"] == ["research/jupyter-alice"]
    assert got.examples["unknown_workload"] == ["tenant-acme/debug-shell-5d8f7c"]


def test_the_order_readings_come_in_changes_nothing() -> None:
    readings = parse_exposition(fixture("gpu-node-2.txt")) + parse_exposition(
        fixture("gpu-node-1.txt")
    )
    expected = attribute(readings, SPEC, AT)
    shuffled = list(readings)
    random.Random(7).shuffle(shuffled)
    assert attribute(shuffled, SPEC, AT) == expected


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["train", "chat", "chat-large"]), st.text("abcdefgh", min_size=5)
        ),
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_replicas_number_each_workloads_pods_from_0_in_name_order(
    pods: list[tuple[str, str]], shuffle: random.Random
) -> None:
    namespace = {"train": "tenant-acme", "chat": "tenant-globex", "chat-large": "tenant-globex"}
    readings = [
        DcgmReading("gpu-node-1", i, namespace[w], f"{w}-{suffix}", memory_used_mib=1.0)
        for i, (w, suffix) in enumerate(pods)
    ]
    samples = attribute(readings, SPEC, AT).samples
    shuffle.shuffle(readings)
    assert attribute(readings, SPEC, AT).samples == samples
    for workload in namespace:
        names = sorted({f"{w}-{s}" for w, s in pods if w == workload})
        replicas = {s.replica for s in samples if s.workload == workload}
        assert replicas == set(range(len(names)))


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ("chat-7c9f8b6d5-x2x9q", "chat"),
        ("chat-large-6c9d7f9b8-q4x7z", "chat-large"),  # the longest name that fits wins
        ("chat-larger-0", "chat"),  # `chat-large` must be followed by `-`
        ("chat", None),
        ("chatbot-1", None),
        ("train-8x2kq", None),  # not one of these workloads
    ],
)
def test_a_pod_belongs_to_the_longest_workload_name_that_begins_it(
    pod: str, expected: str | None
) -> None:
    assert workload_of_pod(pod, ["chat", "chat-large"]) == expected


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu="0" 1\n', 2),
        ("# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu=0} 1\n", 2),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40\nDCGM_FI_DEV_FB_USED{gpu="0"} lots\n', 2),
        ("# HELP DCGM_FI_DEV_FB_USED used\n# TYPE DCGM_FI_DEV_FB_USED\n", 2),
    ],
)
def test_text_that_is_not_prometheus_format_is_refused_naming_the_line(
    text: str, line: int
) -> None:
    with pytest.raises(DcgmInputError) as raised:
        parse_exposition(text, source="http://node:9400/metrics")
    wrong = text.splitlines()[line - 1]
    assert f"http://node:9400/metrics: line {line} " in raised.value.message
    assert repr(wrong) in raised.value.message
    assert raised.value.exit_code == 2


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ('DCGM_FI_DEV_FB_USED{Hostname="n1"} 5\n', "the gpu label '' is not a GPU index"),
        ('DCGM_FI_DEV_FB_USED{gpu="first"} 5\n', "the gpu label 'first'"),
        ('DCGM_FI_DEV_FB_USED{gpu="²"} 5\n', "the gpu label '²'"),
        ('DCGM_FI_DEV_FB_USED{gpu="0",GPU_I_ID="x"} 5\n', "the GPU_I_ID label 'x'"),
        ('DCGM_FI_DEV_FB_USED{gpu="12345678901"} 5\n', "the gpu label '12345678901'"),
        (f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-{"f" * 61}"}} 5\n', "UUID label is over 64"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} -3\n', "a negative value"),
    ],
)
def test_series_gpuplex_cannot_place_are_refused_naming_the_series(text: str, what: str) -> None:
    with pytest.raises(DcgmInputError, match=what) as raised:
        parse_exposition(text)
    assert text.split("{", 1)[0] in raised.value.message


def test_other_metrics_are_read_for_format_only() -> None:
    text = 'DCGM_FI_DEV_GPU_TEMP{gpu="zero"} 40\nDCGM_FI_DEV_POWER_USAGE{gpu="0"} -1\n'
    assert parse_exposition(text) == []


def test_dcgm_blanks_and_nan_are_no_value_not_zero() -> None:
    text = (
        series(
            "DCGM_FI_DEV_GPU_UTIL", "9223372036854775794", ',namespace="tenant-acme",pod="train-a"'
        )
        + series("DCGM_FI_DEV_FB_USED", "NaN", ',namespace="tenant-acme",pod="train-a"')
        + series("DCGM_FI_DEV_FB_USED", "1024", ',namespace="tenant-acme",pod="train-b"')
        + series("DCGM_FI_DEV_GPU_UTIL", "101", ',namespace="tenant-acme",pod="train-b"')
    )
    readings = {r.pod: r for r in parse_exposition(text)}
    assert (readings["train-a"].gpu_util_percent, readings["train-a"].memory_used_mib) == (
        None,
        None,
    )
    assert readings["train-b"].gpu_util_percent == 100.0  # a rounding overshoot, clamped
    samples = attribute(list(readings.values()), SPEC, AT).samples
    assert [(s.memory_used_mib, s.utilization_percent) for s in samples] == [
        (0, None),
        (1024, 100.0),
    ]


def test_copies_of_one_pods_series_are_merged_not_added() -> None:
    pod = ',namespace="tenant-acme",pod="train-a"'
    text = (
        series("DCGM_FI_DEV_FB_USED", "500", f',container="a"{pod}')
        + series("DCGM_FI_DEV_FB_USED", "700", f',container="b"{pod}')
        + series("DCGM_FI_DEV_GPU_UTIL", "40", f',container="a"{pod}')
    )
    (reading,) = parse_exposition(text)
    assert (reading.memory_used_mib, reading.gpu_util_percent) == (700.0, 40.0)


def test_a_pods_mig_instances_on_one_gpu_add_up_into_one_sample() -> None:
    pod = ',namespace="tenant-globex",pod="chat-0"'

    def instance(gi: str, profile: str, used: str, active: str) -> str:
        labels = f',GPU_I_PROFILE="{profile}",GPU_I_ID="{gi}"{pod}'
        return series("DCGM_FI_DEV_FB_USED", used, labels) + series(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE", active, labels
        )

    text = instance("3", "1g.10gb", "1000", "0.7") + instance("5", "2g.20gb", "2000", "0.35")
    (sample,) = attribute(parse_exposition(text), SPEC, AT).samples
    assert sample.memory_used_mib == 3000
    assert sample.utilization_percent == pytest.approx(0.7 * 100 / 7 + 0.35 * 200 / 7)


def test_mig_busy_time_needs_a_gpu_model_the_catalog_can_size() -> None:
    h100, a30 = gpu_model("H100-80GB"), gpu_model("A30")
    assert mig_share(h100, "3g.40gb") == 3 / 7
    assert mig_share(a30, "2g.12gb") == 2 / 4
    assert mig_share(h100, "2g.21gb") == 2 / 7  # not in the catalog: sized by its name
    assert mig_share(h100, "odd") is None
    assert mig_share(gpu_model("L40S"), "1g.10gb") is None
    assert mig_share(None, "1g.10gb") is None
    unknown = DcgmReading(
        "n1", 0, "tenant-globex", "chat-0", model_name="NVIDIA A800-SXM4-80GB",
        mig_profile="2g.20gb", gpu_instance_id=3, memory_used_mib=10.0, gr_engine_active=0.5,
    )  # fmt: skip
    assert utilization_percent(unknown) is None  # unknown is not busy
    (sample,) = attribute([unknown], SPEC, AT).samples
    assert (sample.memory_used_mib, sample.utilization_percent) == (10, None)


def test_model_names_with_blanks_replaced_are_known_too() -> None:
    assert gpu_model_of("NVIDIA H100 80GB HBM3") == gpu_model("H100-80GB")
    assert gpu_model_of("NVIDIA-H100-80GB-HBM3") == gpu_model("H100-80GB")
    assert gpu_model_of("NVIDIA-A100-SXM4-80GB") == gpu_model("A100-80GB")
    assert gpu_model_of("NVIDIA A800-SXM4-80GB") is None
    assert gpu_model_of("") is None


def test_the_old_attribute_names_are_read_too() -> None:
    text = series(
        "DCGM_FI_DEV_FB_USED", "64", ',uuid="GPU-2",pod_name="train-a",pod_namespace="tenant-acme"'
    )
    (sample,) = attribute(parse_exposition(text.replace('UUID="GPU-1",', "")), SPEC, AT).samples
    assert (sample.tenant, sample.workload, sample.gpu_uuid) == ("acme", "train", "GPU-2")


def test_a_reading_without_hostname_names_no_node_and_is_skipped() -> None:
    text = series("DCGM_FI_DEV_FB_USED", "64", ',namespace="tenant-acme",pod="train-a"')
    got = attribute(parse_exposition(text.replace(',Hostname="n1"', "")), SPEC, AT)
    assert (got.samples, got.skipped) == ([], {"no_node": 1})


def test_the_stats_report_scrapes_samples_and_skips() -> None:
    stats = DcgmScrapeStats()
    stats.scraped(ok=True)
    stats.scraped(ok=False)
    stats.stored(6, {"no_pod": 2}, AT)
    values = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in stats.families()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }
    assert values[("gpuplex_dcgm_scrapes_total", (("outcome", "failed"),))] == 1
    assert values[("gpuplex_dcgm_samples_total", ())] == 6
    assert values[("gpuplex_dcgm_series_skipped_total", (("reason", "no_pod"),))] == 2
    assert values[("gpuplex_dcgm_series_skipped_total", (("reason", "no_node"),))] == 0
    assert values[("gpuplex_dcgm_last_stored_timestamp_seconds", ())] == AT.timestamp()


def server_settings(
    monkeypatch: pytest.MonkeyPatch, *args: str
) -> tuple[int, str, list[ServerSettings]]:
    """`gpuplex server ARGS` up to the point where it would start serving."""
    started: list[ServerSettings] = []
    monkeypatch.setattr("gpuplex.server.run.run_server", started.append)
    app = typer.Typer()
    app.command("server")(server_command)
    app.command("version")(lambda: None)  # a second command keeps `server` a subcommand
    result = CliRunner().invoke(app, ["server", "--store", "sqlite:///unused.db", *args])
    words = " ".join(result.output.replace("│", " ").split())  # rich's error box, unwrapped
    return result.exit_code, words, started


def test_dcgm_urls_come_from_the_option_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUPLEX_DCGM_URLS", " http://a:9400/metrics, ,http://b:9400/metrics ")
    code, _, started = server_settings(monkeypatch)
    assert code == 0
    assert started[0].dcgm_urls == ("http://a:9400/metrics", "http://b:9400/metrics")
    assert started[0].dcgm_interval_s == 15.0
    code, _, started = server_settings(
        monkeypatch, "--dcgm-url", "http://c:9400/metrics", "--dcgm-interval-s", "30"
    )
    assert (started[0].dcgm_urls, started[0].dcgm_interval_s) == (("http://c:9400/metrics",), 30.0)
    monkeypatch.delenv("GPUPLEX_DCGM_URLS")
    _, _, started = server_settings(monkeypatch)
    assert started[0].dcgm_urls == ()


def test_a_dcgm_url_gpuplex_cannot_read_is_refused_before_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, output, started = server_settings(monkeypatch, "--dcgm-url", "nvidia-dcgm-exporter:9400")
    assert (code, started) == (2, [])
    assert "--dcgm-url" in output
    assert "not an http(s) URL" in output
    assert "Traceback" not in output
    monkeypatch.setenv("GPUPLEX_DCGM_URLS", "ftp://x/metrics")
    code, output, _ = server_settings(monkeypatch)
    assert code == 2
    assert "GPUPLEX_DCGM_URLS" in output


def test_the_fixtures_are_what_the_spec_would_plan() -> None:
    """The fixtures' tenants sit where the planner puts them, so the integration test's roll-up
    finds each GPU's model in the plan. The fixtures put time-sliced shares beside whole GPUs on
    one node, which the device plugin cannot run, so they match the host plan of the spec (its
    Kubernetes plan leaves initech/playground unplaced)."""
    from gpuplex.core.plan import Target, make_plan

    plan = make_plan(SPEC, target=Target.HOST)
    placed = {(p.tenant, p.workload, p.replica): (p.node, p.gpu_indices) for p in plan.placements}
    assert placed == {
        ("acme", "train", 0): ("gpu-node-1", [0]),
        ("acme", "train", 1): ("gpu-node-1", [1]),
        ("globex", "chat", 0): ("gpu-node-1", [2]),
        ("globex", "chat-large", 0): ("gpu-node-1", [2]),
        ("initech", "playground", 0): ("gpu-node-1", [3]),
        ("initech", "playground", 1): ("gpu-node-1", [3]),
    }
