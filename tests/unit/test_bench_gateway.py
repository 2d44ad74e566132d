"""The gateway benchmark's own arithmetic and load scripts (the benchmark itself needs wrk, nginx
and a quiet machine: `make bench-gateway`). No timing assertions."""

from __future__ import annotations

import re

import pytest
from bench.gateway_load import CLOSED, PACED, Load, chat_body, wrk_script
from bench.gateway_report import (
    AFTER,
    BEFORE,
    DIRECT,
    NGINX,
    NON_STREAMING,
    Comparison,
    Measured,
    Results,
    TreeRun,
)
from bench.planner_measure import Machine

GATEWAY = "gateway"


def load(tool: str, rate_per_s: float, p50_ms: float, p99_ms: float, errors: int = 0) -> Load:
    return Load(tool, 1000, 10.0, rate_per_s, p50_ms, p99_ms, errors, "")


def results(*runs: tuple[str, Load]) -> Results:
    measured = Results(Machine("cpu", 2, "CPython", "Linux"), "0.1", {})
    measured.runs = [Measured(setup, NON_STREAMING, run) for setup, run in runs]
    return measured


def test_a_row_adds_latency_over_the_backend_and_compares_with_nginx() -> None:
    measured = results(
        (DIRECT, load(CLOSED, 20_000, 0.2, 0.3)),
        (DIRECT, load(PACED, 1_000, 0.2, 0.8)),
        (NGINX, load(CLOSED, 10_000, 0.3, 0.4)),
        (NGINX, load(PACED, 1_000, 0.4, 1.3)),
        (GATEWAY, load(CLOSED, 4_000, 1.0, 5.0, errors=2)),
        (GATEWAY, load(PACED, 990, 1.0, 3.8, errors=1)),
    )
    row = measured.row(GATEWAY, NON_STREAMING)
    assert row.rate_per_s == 4_000  # the closed loop's rate, not the paced one's
    assert (row.p50_ms, row.p99_ms) == (1.0, 3.8)  # the paced run's percentiles
    assert row.added_p50_ms == pytest.approx(0.8)
    assert row.added_p99_ms == pytest.approx(3.0)
    assert row.rate_over_nginx == pytest.approx(0.4)
    assert row.added_p50_over_nginx == pytest.approx(0.8 / 0.2)
    assert row.added_p99_over_nginx == pytest.approx(3.0 / 0.5)
    assert row.errors == 3


def test_no_ratio_to_an_nginx_that_adds_nothing_and_no_added_latency_for_the_backend() -> None:
    measured = results(
        (DIRECT, load(PACED, 1_000, 0.5, 2.0)),
        (NGINX, load(PACED, 1_000, 0.5, 1.9)),  # adds 0 and -0.1 ms: noise
        (GATEWAY, load(PACED, 1_000, 1.0, 4.0)),
    )
    row = measured.row(GATEWAY, NON_STREAMING)
    assert (row.added_p50_over_nginx, row.added_p99_over_nginx) == (None, None)
    assert row.rate_per_s is None  # no closed-loop run measured
    backend = measured.row(DIRECT, NON_STREAMING)
    assert (backend.added_p50_ms, backend.added_p99_ms) == (None, None)


def test_the_closed_loop_script_sends_the_body_and_key_without_pacing() -> None:
    script = wrk_script(chat_body(False), "gpx_abc_secret", 64, None)
    assert '"model":"bench"' in script
    assert 'wrk.headers["Authorization"] = "Bearer gpx_abc_secret"' in script
    assert "delay" not in script


@pytest.mark.parametrize(("connections", "rate", "mean_ms"), [(100, 1000, 100.0), (50, 2000, 25.0)])
def test_the_paced_script_waits_an_exponential_time_of_connections_over_rate(
    connections: int, rate: int, mean_ms: float
) -> None:
    script = wrk_script(chat_body(True), "k", connections, rate)
    found = re.search(r"return -math\.log\(1 - math\.random\(\)\) \* ([\d.]+)", script)
    assert found is not None
    assert float(found.group(1)) == pytest.approx(mean_ms)
    assert "delay = function()" in script


def test_the_verdict_reads_the_median_of_paired_rounds_not_the_ratio_of_means() -> None:
    """Round 0 ran while the machine was fast and slowed down between its two runs (0.83); in
    rounds 1 and 2 after is 2 % slower. The ratio of the means, pulled by the fast round, would
    say 11 % slower; the median of the pairs says 2 %."""
    comparison = Comparison(Machine("cpu", 2, "CPython", "Linux"), "0.1", {}, "b", "a", [GATEWAY])
    pairs = [(3000.0, 2500.0), (1000.0, 980.0), (1000.0, 980.0)]
    for round_, (before, after) in enumerate(pairs):
        for tree, rate in ((BEFORE, before), (AFTER, after)):
            run = TreeRun(GATEWAY, NON_STREAMING, tree, round_, load(CLOSED, rate, 1.0, 2.0))
            comparison.runs.append(run)
    row = comparison.row(GATEWAY, NON_STREAMING)
    assert row.round_ratios == pytest.approx([2500 / 3000, 0.98, 0.98])
    assert row.ratio == pytest.approx(0.98)
    assert row.after_rate_per_s is not None
    assert row.before_rate_per_s is not None
    assert row.after_rate_per_s / row.before_rate_per_s == pytest.approx(4460 / 5000)
    assert row.verdict.startswith("within 10 % (after is 2 % slower)")
