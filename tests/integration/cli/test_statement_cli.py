"""`gpuplex statement` against a real control plane: the app under uvicorn on a loopback port with a
real store, a spec where bravoco's LoRA adapter rides on alphaco's server, a rolled-up hour with
traffic; the command as a user runs it (a subprocess), in table, csv and json, and its one-line
errors with the error model's exit codes."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import Engine

from gpuplex.error_codes import EXIT_BAD_INPUT, EXIT_FAILED
from gpuplex.server.app import create_app
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, make_api
from tests.integration.server.test_rider_billing_api import SHARED_SPEC, _record
from tests.integration.sim.servers import free_port

# The store tests' fixtures (a new SQLite file or PostgreSQL schema per test), shared, not copied.
from tests.integration.store.conftest import engine, postgres_dsn, store_templates, store_url

__all__ = ["engine", "postgres_dsn", "store_templates", "store_url"]

ROOT = Path(__file__).resolve().parents[3]
PERIOD = "2026-03"
HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Running:
    url: str
    tokens: dict[str, str]


@pytest.fixture
def control_plane(engine: Engine, tmp_path: Path) -> Iterator[Running]:
    api = make_api(engine, tmp_path)
    api.apply(SHARED_SPEC)
    api.ctx.usage.insert_many(
        [_record(1, TENANT_B, "bravoco-legal", 3000), _record(2, TENANT_A, "alphaco-chat", 1000)]
    )
    api.clock.advance(2 * HOUR)
    api.ctx.metering.roll_up_range(T0, T0 + HOUR)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(api.ctx), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the control plane did not start"
        time.sleep(0.05)
    try:
        yield Running(url, api.tokens)
    finally:
        server.should_exit = True
        thread.join(10)


def statement(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLEX_")}
    return subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "gpuplex.cli", "statement", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**base, **(env or {}), "COLUMNS": "200"},
    )


def test_a_tenants_statement_as_json_is_the_apis(control_plane: Running) -> None:
    done = statement(
        TENANT_B,
        "--period",
        PERIOD,
        "-o",
        "json",
        "--server",
        control_plane.url,
        "--token",
        control_plane.tokens["admin"],
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    request = urllib.request.Request(  # noqa: S310 - a loopback http URL we built
        f"{control_plane.url}/api/v1/tenants/{TENANT_B}/statements/{PERIOD}",
        headers={"Authorization": f"Bearer {control_plane.tokens['admin']}"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
        assert body == json.load(reply)
    assert Decimal(body["total"]) > 0  # the rider pays its share of the server it rides on


def test_the_table_shows_the_lines_and_the_total(control_plane: Running) -> None:
    env = {
        "GPUPLEX_SERVER_URL": control_plane.url,
        "GPUPLEX_TOKEN": control_plane.tokens["b-viewer"],
    }
    done = statement(TENANT_B, "--period", PERIOD, env=env)
    assert done.returncode == 0, done.stderr
    assert f"{TENANT_B} · {PERIOD} · USD" in done.stdout
    assert "GPU allocation" in done.stdout
    assert "H100-80GB/mps" in done.stdout
    total = json.loads(statement(TENANT_B, "--period", PERIOD, "-o", "json", env=env).stdout)
    [total_line] = [line for line in done.stdout.splitlines() if "Total" in line]
    assert total_line.split()[-2] == total["total"]


def test_the_fleet_as_csv_adds_up_to_the_fleet_cost(control_plane: Running) -> None:
    env = {"GPUPLEX_SERVER_URL": control_plane.url, "GPUPLEX_TOKEN": control_plane.tokens["admin"]}
    done = statement("--period", PERIOD, "-o", "csv", env=env)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    totals = {r["tenant"]: Decimal(r["amount"]) for r in rows if r["description"] == "Total"}
    assert set(totals) == {"alphaco", "bravoco", "charlieco"}
    [idle] = [Decimal(r["amount"]) for r in rows if r["description"] == "Idle capacity"]
    [fleet] = [Decimal(r["amount"]) for r in rows if r["description"] == "Fleet cost"]
    assert sum(totals.values()) + idle == fleet
    assert totals["bravoco"] > 0
    table = statement("--period", PERIOD, env=env)
    assert table.returncode == 0, table.stderr
    assert "Fleet cost" in table.stdout
    assert "bravoco" in table.stdout


def test_errors_are_one_line_with_the_error_models_exit_code(control_plane: Running) -> None:
    env = {"GPUPLEX_SERVER_URL": control_plane.url, "GPUPLEX_TOKEN": control_plane.tokens["admin"]}
    cases = [
        (["alphaco", "--period", "2026-13"], EXIT_BAD_INPUT, "no month 13"),
        (["alphaco", "--period", "March"], EXIT_BAD_INPUT, "YYYY-MM"),
        (["nosuchco", "--period", PERIOD], EXIT_BAD_INPUT, "nosuchco"),
        (
            ["--period", PERIOD, "--server", f"http://127.0.0.1:{free_port()}"],
            EXIT_FAILED,
            "cannot reach the control plane",
        ),
        (["alphaco", "--period", PERIOD, "--token", "gp_nope"], EXIT_FAILED, "token"),
    ]
    for args, exit_code, words in cases:
        done = statement(*args, env=env)
        assert done.returncode == exit_code, (args, done.stdout, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, (args, done.stderr)
        assert lines[0].startswith("error: "), (args, done.stderr)
        assert words in lines[0], (args, done.stderr)
        assert "Traceback" not in done.stderr
    no_token = statement(
        "alphaco", "--period", PERIOD, env={"GPUPLEX_SERVER_URL": control_plane.url}
    )
    assert no_token.returncode == EXIT_FAILED
    assert "no token" in no_token.stderr
    viewer = {**env, "GPUPLEX_TOKEN": control_plane.tokens["b-viewer"]}
    other = statement("alphaco", "--period", PERIOD, env=viewer)  # not theirs: as if not there
    assert other.returncode == EXIT_BAD_INPUT, other.stderr
    assert "no tenant 'alphaco'" in other.stderr
