"""`bench/gateway.py --vllm`'s arithmetic (the benchmark itself needs vLLM and wrk: `make vllm`,
then `bench/gateway.py --vllm`). No timing assertions."""

from __future__ import annotations

import statistics

import pytest
from bench.gateway_load import CLOSED, PACED, Load
from bench.gateway_report import NON_STREAMING, STREAMING
from bench.gateway_vllm import parse
from bench.gateway_vllm_report import DIRECT, PLAIN, VllmOptions, VllmResults, VllmRun


def run(
    setup: str,
    tool: str,
    round_: int,
    rate: float,
    p50: float,
    p99: float,
    gateway_cpu_s: float | None = None,
    vllm_cpu_s: float = 1.0,
    requests: int = 100,
    mode: str = NON_STREAMING,
) -> VllmRun:
    load = Load(tool, requests, 10.0, rate, p50, p99, 0, "")
    return VllmRun(setup, mode, round_, load, gateway_cpu_s, vllm_cpu_s)


def test_added_latency_and_the_rate_ratio_are_medians_of_same_round_pairs() -> None:
    results = VllmResults(VllmOptions(), "cpu", "0.1")
    results.runs = [
        # round 0: a fast machine; round 1: everything slower
        run(DIRECT, CLOSED, 0, 40, 100, 120),
        run(DIRECT, PACED, 0, 6, 100, 150),
        run(PLAIN.label, CLOSED, 0, 30, 110, 130, gateway_cpu_s=0.2, requests=300),
        run(PLAIN.label, PACED, 0, 6, 102, 160, gateway_cpu_s=0.1),
        run(DIRECT, CLOSED, 1, 20, 200, 220),
        run(DIRECT, PACED, 1, 6, 200, 300),
        run(PLAIN.label, CLOSED, 1, 18, 210, 230, gateway_cpu_s=0.2, requests=100),
        run(PLAIN.label, PACED, 1, 6, 206, 290, gateway_cpu_s=0.1),
        run(PLAIN.label, PACED, 1, 6, 999, 999, mode=STREAMING),  # another mode
    ]
    row = results.row(PLAIN.label, NON_STREAMING)
    assert row.rate_per_s == pytest.approx(24)  # median of 30 and 18
    assert row.rate_over_direct == pytest.approx((0.75 + 0.9) / 2)  # not 24 / 30
    assert row.added_p50_ms == pytest.approx((2 + 6) / 2)
    assert row.added_p99_ms == pytest.approx((10 - 10) / 2)
    assert row.gateway_cpu_us == pytest.approx(0.4 * 1e6 / 400)  # closed-loop runs only
    assert row.vllm_cpu_ms == pytest.approx(2.0 * 1e3 / 400)
    direct = results.row(DIRECT, NON_STREAMING)
    assert (direct.rate_over_direct, direct.added_p50_ms) == (1.0, 0.0)
    assert direct.gateway_cpu_us is None


def test_a_setup_without_runs_has_no_numbers() -> None:
    row = VllmResults(VllmOptions(), "cpu", "0.1").row(PLAIN.label, STREAMING)
    assert (row.rate_per_s, row.added_p99_ms, row.gateway_cpu_us, row.errors) == (
        None,
        None,
        None,
        0,
    )


def test_options_default_to_a_paced_load_far_under_what_vllm_serves() -> None:
    options, _ = parse([])
    assert options.paced_connections / options.rate_per_s == 2  # mean think time 2 s
    options, _ = parse(["--duration-s", "3", "--rounds", "1", "--rate", "4"])
    assert (options.duration_s, options.rounds, options.rate_per_s) == (3, 1, 4)
    with pytest.raises(SystemExit):
        parse(["--rate", "0"])


def test_one_at_a_time_the_added_latency_is_the_median_of_per_request_differences() -> None:
    results = VllmResults(VllmOptions(), "cpu", "0.1")
    direct = [100.0 + 10 * i for i in range(100)]  # the machine slows down as it goes
    gateway = [d + 2.0 for d in direct]
    gateway[50] += 300  # one slow request
    results.one_by_one[NON_STREAMING] = {DIRECT: direct, PLAIN.label: gateway}
    row = results.one_by_one_row(PLAIN.label, NON_STREAMING)
    assert row is not None
    assert row.added_median_ms == pytest.approx(2.0)  # not moved by the drift or the outlier
    assert row.p50_ms == pytest.approx(statistics.median(gateway))
    assert row.added_p99_ms == pytest.approx(row.p99_ms - (100 + 10 * 98.01))
    assert results.one_by_one_row(PLAIN.label, STREAMING) is None
