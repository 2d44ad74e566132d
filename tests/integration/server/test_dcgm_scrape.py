"""The DCGM scraper against real HTTP on loopback and a real store (SQLite and PostgreSQL): what two
nodes' dcgm-exporters print becomes GPU samples that the roll-up meters as busy GPU-seconds and
memory per tenant; an exporter that refuses, hangs or prints garbage is logged and read again next
time while the others' samples are stored; a headless Service's name is read at every address."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from gpuplex.core.meter import BUSY_GPU_SECONDS, MEMORY_MIB_SECONDS, MeterWindow
from gpuplex.server.context import ServerContext
from gpuplex.server.dcgm_scrape import DcgmScraper, ScrapeTarget, check_dcgm_url, targets
from gpuplex.server.metrics.dcgm_metrics import DcgmScrapeStats
from gpuplex.server.spec_apply import apply
from tests.clocks import ManualClock
from tests.integration.server.conftest import T0
from tests.ports import free_port
from tests.unit.observe.dcgm_spec import SPEC_YAML

FIXTURES = Path(__file__).parents[2] / "unit" / "observe" / "fixtures"
NODE_1 = (FIXTURES / "gpu-node-1.txt").read_bytes()
NODE_2 = (FIXTURES / "gpu-node-2.txt").read_bytes()
MINUTE = timedelta(minutes=1)
SLOW_S = 3.0


@dataclass
class Exporter:
    """A dcgm-exporter stand-in: path -> body; `/slow` answers after SLOW_S; records Host."""

    server: ThreadingHTTPServer
    bodies: dict[str, bytes] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


def start_exporter(address: str = "127.0.0.1", port: int = 0) -> Exporter:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stub.hosts.append(self.headers.get("Host", ""))
            if self.path == "/slow":
                time.sleep(SLOW_S)
            body = stub.bodies.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer((address, port), Handler)
    stub = Exporter(server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return stub


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    started = start_exporter()
    started.bodies |= {"/node-1": NODE_1, "/node-2": NODE_2, "/slow": NODE_2}
    try:
        yield started
    finally:
        started.server.shutdown()
        started.server.server_close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def ctx(engine: Engine, clock: ManualClock) -> ServerContext:
    opened = ServerContext.open(engine, clock, rollup_window_s=60)
    apply(opened.spec_history, SPEC_YAML, 0, actor="test")
    return opened


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/metrics"


def test_scraped_samples_are_rolled_up_as_busy_gpu_seconds_and_memory(
    ctx: ServerContext, exporter: Exporter, clock: ManualClock
) -> None:
    stats = DcgmScrapeStats()
    urls = [exporter.url("/node-1"), exporter.url("/node-2")]
    scraper = DcgmScraper(ctx, urls, interval_s=30, timeout_s=2, stats=stats)
    for k in range(9):  # every 30 s from T0 + 10 s to T0 + 250 s
        clock.at = T0 + timedelta(seconds=10 + 30 * k)
        assert scraper.pass_once() == 6
    clock.at = T0 + 5 * MINUTE
    assert ctx.metering.catch_up(clock.utc_now()).windows == 5
    lines = ctx.metering.lines(MeterWindow(T0, T0 + 5 * MINUTE))
    measured = {
        (x.tenant, x.metric, x.dimension): x.quantity for x in lines if x.source == "measured"
    }
    held_s = Decimal(290)  # each sample holds until the next; the last one until the window's end
    assert measured["acme", BUSY_GPU_SECONDS, "H100-80GB"] == held_s * Decimal(
        "1.85"
    )  # 97 % + 88 %
    assert measured["acme", MEMORY_MIB_SECONDS, "H100-80GB"] == held_s * (71234 + 70110)
    assert measured["initech", BUSY_GPU_SECONDS, "H100-80GB"] == held_s * Decimal("0.55")
    assert measured["initech", MEMORY_MIB_SECONDS, "H100-80GB"] == held_s * (12000 + 9000)
    globex = float(measured["globex", BUSY_GPU_SECONDS, "H100-80GB"])
    assert globex == pytest.approx(290 * (0.7 * 3 / 7 + 0.5 * 4 / 7), rel=1e-9)  # MIG, scaled
    assert {tenant for tenant, _, _ in measured} == {"acme", "globex", "initech"}
    values = {
        (s.name, tuple(s.labels.values())): s.value for f in stats.families() for s in f.samples
    }
    assert values["gpuplex_dcgm_scrapes_total", ("ok",)] == 18
    assert values["gpuplex_dcgm_samples_total", ()] == 54
    assert values["gpuplex_dcgm_series_skipped_total", ("no_pod",)] == 18
    assert values["gpuplex_dcgm_series_skipped_total", ("not_tenant_namespace",)] == 9
    assert values["gpuplex_dcgm_series_skipped_total", ("unknown_workload",)] == 9


def test_an_exporter_that_fails_is_logged_and_read_again_while_the_others_count(
    ctx: ServerContext, exporter: Exporter, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    exporter.bodies["/garbage"] = (
        b'# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu="0" 7\n'
    )
    failing = [closed_port_url(), exporter.url("/slow"), exporter.url("/garbage")]
    stats = DcgmScrapeStats()
    scraper = DcgmScraper(ctx, [*failing, exporter.url("/node-1")], 30, timeout_s=0.5, stats=stats)
    caplog.set_level(logging.INFO, logger="gpuplex.server.dcgm")
    assert scraper.pass_once() == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    for url in failing:
        assert any(url in w for w in warnings), url
    assert any("refused" in w.lower() for w in warnings)
    assert any("timed out" in w.lower() for w in warnings)
    assert any("line 2 is not Prometheus text format" in w for w in warnings)
    caplog.clear()
    clock.advance(timedelta(seconds=30))
    assert scraper.pass_once() == 6
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []  # said once
    exporter.bodies["/garbage"] = NODE_2
    assert scraper.pass_once() == 6
    assert any("is read again" in r.getMessage() for r in caplog.records)
    (skipped,) = [r for r in caplog.records if "metered to no tenant" in r.getMessage()]
    assert skipped.levelno == logging.WARNING  # a tenant's pod that bills nothing measured
    assert "1 unknown_workload (e.g. tenant-acme/debug-shell-5d8f7c)" in skipped.getMessage()
    assert "2 no_pod" in skipped.getMessage()
    values = {
        (s.name, tuple(s.labels.values())): s.value for f in stats.families() for s in f.samples
    }
    assert values["gpuplex_dcgm_scrapes_total", ("failed",)] == 3 + 3 + 2


def test_the_scraper_thread_outlives_failures(ctx: ServerContext, exporter: Exporter) -> None:
    stats = DcgmScrapeStats()
    urls = [closed_port_url(), exporter.url("/node-1")]
    scraper = DcgmScraper(ctx, urls, interval_s=0.05, timeout_s=1, stats=stats)
    scraper.start()
    try:
        deadline = time.monotonic() + 10
        while len(exporter.hosts) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(exporter.hosts) >= 3
        assert scraper.is_alive()
    finally:
        scraper.stopping.set()
        scraper.join(timeout=5)
    assert not scraper.is_alive()
    at, samples = ctx.samples.latest()  # the test's clock stands still: every pass's samples
    assert at is not None
    assert {(s.tenant, s.workload, s.replica) for s in samples} == {
        ("acme", "train", 0),
        ("acme", "train", 1),
        ("globex", "chat", 0),
        ("globex", "chat-large", 0),
        ("initech", "playground", 0),
        ("initech", "playground", 1),
    }


def test_a_headless_service_is_read_at_every_address(
    ctx: ServerContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = start_exporter("127.0.0.1")
    try:
        second = start_exporter("127.0.0.2", first.port)
    except OSError as error:
        first.server.shutdown()
        pytest.skip(f"no second loopback address 127.0.0.2 here: {error}")
    first.bodies["/metrics"], second.bodies["/metrics"] = NODE_1, NODE_2
    name = f"nvidia-dcgm-exporter.gpu-operator.svc:{first.port}"

    real = socket.getaddrinfo

    def resolve(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        if host != "nvidia-dcgm-exporter.gpu-operator.svc":
            return real(host, port, *args, **kwargs)  # the addresses themselves, when connecting
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in ("127.0.0.2", "127.0.0.1")
        ]

    monkeypatch.setattr("gpuplex.server.dcgm_scrape.socket.getaddrinfo", resolve)
    stats = DcgmScrapeStats()
    try:
        scraper = DcgmScraper(ctx, [f"http://{name}/metrics"], 30, timeout_s=2, stats=stats)
        assert scraper.pass_once() == 6
    finally:
        for started in (first, second):
            started.server.shutdown()
            started.server.server_close()
    assert first.hosts == second.hosts == [name]
    skipped = {
        s.labels["reason"]: s.value
        for f in stats.families()
        for s in f.samples
        if "reason" in s.labels
    }
    assert skipped["no_pod"] == 2  # node 2's idle GPUs: it was read too


def test_one_address_per_family_is_not_a_headless_service(monkeypatch: pytest.MonkeyPatch) -> None:
    def resolve(host: str, port: int, *args: object, **kwargs: object) -> list[Any]:
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr("gpuplex.server.dcgm_scrape.socket.getaddrinfo", resolve)
    assert targets("http://localhost:9400/metrics") == [
        ScrapeTarget("http://localhost:9400/metrics")
    ]
    assert targets("https://a.example/metrics") == [ScrapeTarget("https://a.example/metrics")]
    assert targets("http://10.0.0.7:9400/metrics") == [ScrapeTarget("http://10.0.0.7:9400/metrics")]


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("nvidia-dcgm-exporter:9400", r"not an http\(s\) URL"),
        ("ftp://exporter/metrics", r"not an http\(s\) URL"),
        ("http:///metrics", r"not an http\(s\) URL"),
        ("http://exporter:94000/metrics", "the port is not a number"),
        ("http://admin:secret@exporter:9400/metrics", "no credentials"),
    ],
)
def test_urls_gpuplex_cannot_read_are_refused(url: str, why: str) -> None:
    with pytest.raises(ValueError, match=why) as raised:
        check_dcgm_url(url)
    assert "secret" not in str(raised.value)
