"""What a gateway worker takes from a new revision: the routes, limits and backends change, pools
whose backend did not change go on, and the settings a running process cannot change stay as it
started with."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import SpecError
from gpuplex.gateway.live import SpecFileSource, live_config, restart_only_changes
from gpuplex.gateway.runtime import GatewayRuntime
from gpuplex.specfile import load_spec_text

SPEC = """
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 2}}]}}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    rate_limits: {{tokens_per_min: {tpm}}}
    workloads:
      - name: chat
        gpu: {{memory_gib: 20}}
        serve: {{model: llm, port: 9100}}
      - name: other
        gpu: {{memory_gib: 20}}
        serve: {{model: {other_model}, port: 9200}}
gateway:
  port: {port}
  max_body_kib: {body_kib}
  backends:
    acme/other: ["{other_url}"]
"""


def spec_text(
    tpm: int = 1000,
    other_model: str = "other",
    port: int = 8080,
    body_kib: int = 1024,
    other_url: str = "http://127.0.0.1:9200",
) -> str:
    return SPEC.format(
        tpm=tpm, other_model=other_model, port=port, body_kib=body_kib, other_url=other_url
    )


def test_a_new_revision_changes_limits_models_and_routes_and_keeps_unchanged_pools() -> None:
    first_spec = load_spec_text(spec_text(), source="r1")
    first = live_config("revision 1", first_spec, first_spec.gateway)
    changed = load_spec_text(
        spec_text(tpm=50, other_model="renamed", other_url="http://10.0.0.2:9200"), source="r2"
    )
    second = live_config("revision 2", changed, first_spec.gateway, first)
    assert second.routes.tenants["acme"].rate_limits.tokens_per_min == 50
    assert second.routes.models_of("acme") == ["llm", "renamed"]
    assert second.pools["acme/chat"] is first.pools["acme/chat"]  # its queue and health go on
    assert second.pools["acme/other"] is not first.pools["acme/other"]
    assert second.pools["acme/other"].backend.urls == ("http://10.0.0.2:9200",)


def test_settings_a_running_gateway_cannot_change_stay_as_it_started() -> None:
    started = load_spec_text(spec_text(), source="r1").gateway
    changed = load_spec_text(spec_text(port=9999, body_kib=64), source="r2")
    assert restart_only_changes(started, changed.gateway) == ["port"]
    live = live_config("revision 2", changed, started)
    assert live.config.port == 8080  # still listening where it started
    assert live.config.max_body_kib == 64  # a per-request limit: in force at once


def test_a_spec_file_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(spec_text())
    source = SpecFileSource(path)
    first = source.newest()
    assert first is not None
    assert source.newest() is first  # unchanged: not parsed again
    path.write_text(spec_text(tpm=7))
    os.utime(path, ns=(1, 1))  # a new time stamp even on a coarse clock
    second = source.newest()
    assert second is not None
    assert second[0] != first[0]
    assert second[1].tenants[0].rate_limits.tokens_per_min == 7


def test_an_invalid_spec_file_is_refused_and_says_where(tmp_path: Path) -> None:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(spec_text().replace("tokens_per_min", "tokens_per_minute"))
    with pytest.raises(SpecError) as raised:
        SpecFileSource(path).newest()
    assert "gpuplex.yaml:" in raised.value.message
    assert "tokens_per_minute" in raised.value.message


class FlakySource:
    """A source that cannot be read twice (a spec file saved half-written), then can."""

    def __init__(self, good: tuple[str, GpuplexSpec], stop: asyncio.Event) -> None:
        self.good = good
        self.stop = stop
        self.calls = 0

    def newest(self) -> tuple[str, GpuplexSpec] | None:
        self.calls += 1
        if self.calls <= 2:
            raise SpecError("gpuplex.yaml", [])
        self.stop.set()
        return self.good


class FakeKeys:
    def __init__(self) -> None:
        self.rebuilt = 0

    def rebuild(self) -> None:
        self.rebuilt += 1


def test_a_source_that_cannot_be_read_keeps_the_revision_served_and_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = load_spec_text(spec_text(), source="r1")
    runtime = GatewayRuntime.__new__(GatewayRuntime)  # only what following a source needs
    runtime.started = first.gateway
    runtime.live = live_config("revision 1", first, first.gateway)
    keys = FakeKeys()
    runtime.keys = keys  # type: ignore[assignment]
    runtime._stop = asyncio.Event()
    runtime._source_problem = None
    newer = ("revision 2", load_spec_text(spec_text(tpm=9), source="r2"))
    runtime.source = FlakySource(newer, runtime._stop)
    with caplog.at_level(logging.ERROR):
        asyncio.run(runtime.follow(interval_s=0.01))
    refused = [r for r in caplog.records if "cannot take a new revision" in r.getMessage()]
    assert len(refused) == 1  # the same problem twice is logged once
    assert runtime.live.source_version == "revision 2"  # taken once it could be read
    assert runtime.live.routes.tenants["acme"].rate_limits.tokens_per_min == 9
    assert keys.rebuilt == 1  # the keys' limits follow the tenants'
