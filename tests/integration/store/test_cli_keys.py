"""`gpuplex keys create | list | revoke` end to end on SQLite and PostgreSQL: the key is printed
once and works, lists never show it, and bad input exits 2 with one line on stderr."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from gpuplex.cli.conventions import parse_duration
from gpuplex.cli.keys import keys_app
from gpuplex.clock import utc_now
from gpuplex.core.serve.keys import key_matches, key_prefix
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRecord, KeyRepository
from gpuplex.store.spec_revisions import SpecRevisions

EXIT_BAD_INPUT = 2
SPEC = """\
fleet:
  nodes:
    - name: box
      gpus:
        - model: RTX-4090
tenants:
  - name: alice
    isolation: mps
    workloads:
      - name: notebook
        kind: notebook
        gpu: {memory_gib: 10, compute_percent: 60}
  - name: bob
    isolation: mps
    workloads:
      - name: tiny-llm
        gpu: {memory_gib: 6, compute_percent: 40}
        serve: {model: qwen2.5-0.5b}
"""

app = typer.Typer()
app.add_typer(keys_app, name="keys")


def keys(*args: str, store: str) -> Result:
    result = CliRunner().invoke(app, ["keys", *args, "--store", store])
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)
    return result


def create_json(store: str, *args: str) -> dict[str, Any]:
    result = keys("create", "-o", "json", *args, store=store)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def active(store: str) -> list[KeyRecord]:
    engine = open_store(store)
    try:
        return KeyRepository(engine).active_records(utc_now())
    finally:
        engine.dispose()


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpuplex.yaml"
    path.write_text(SPEC)
    return path


def test_create_prints_a_working_key_once_with_a_warning(store_url: str) -> None:
    result = keys("create", "--tenant", "bob", "--name", "ci", "--rpm", "60", store=store_url)
    assert result.exit_code == 0, result.output
    tokens = [word for word in result.stdout.split() if word.startswith("gpx_")]
    assert len(tokens) == 1
    token = tokens[0]
    assert "will not be shown again" in result.stdout
    (record,) = active(store_url)
    assert record.key.prefix == key_prefix(token)
    assert key_matches(record.key_hash, token)
    assert (record.key.tenant, record.key.name, record.key.limits.requests_per_min) == (
        "bob",
        "ci",
        60,
    )


def test_create_json_for_scripts(store_url: str) -> None:
    before = utc_now()
    data = create_json(
        store_url, "--tenant", "bob", "-m", "a", "-m", "b", "--expires-in", "12h", "--tpm", "1000"
    )
    assert key_prefix(data["key"]) == data["prefix"]
    assert data["models"] == ["a", "b"]
    assert data["tokens_per_min"] == 1000
    assert data["concurrent_requests"] is None
    assert data["state"] == "active"
    (record,) = active(store_url)
    assert record.key.expires_at is not None
    lifetime = record.key.expires_at - before
    assert timedelta(hours=12) <= lifetime < timedelta(hours=12, minutes=1)


def test_list_shows_states_and_never_the_key_or_its_hash(store_url: str) -> None:
    first = create_json(store_url, "--tenant", "alice")
    second = create_json(store_url, "--tenant", "bob", "--model", "qwen2.5-0.5b")
    revoked = keys("revoke", first["prefix"], store=store_url)
    assert revoked.exit_code == 0, revoked.output
    assert f"revoked: key {first['prefix']}" in revoked.stdout
    hashes = [r.key_hash for r in active(store_url)]

    table = keys("list", store=store_url)
    assert table.exit_code == 0, table.output
    for secret in (first["key"], second["key"], *hashes):
        assert secret not in table.output
    lines = {line.split()[1]: line for line in table.stdout.splitlines() if "│" in line}
    assert "revoked" in lines[first["prefix"]]
    assert "active" in lines[second["prefix"]]

    listed = json.loads(keys("list", "-o", "json", store=store_url).stdout)
    assert [(k["prefix"], k["state"]) for k in listed] == [
        (first["prefix"], "revoked"),
        (second["prefix"], "active"),
    ]
    assert all("key" not in k and "key_hash" not in k for k in listed)
    only_bob = json.loads(keys("list", "--tenant", "bob", "-o", "json", store=store_url).stdout)
    assert [k["prefix"] for k in only_bob] == [second["prefix"]]


def test_revoke_twice_is_fine_and_an_unknown_prefix_exits_2(store_url: str) -> None:
    key = create_json(store_url, "--tenant", "bob")
    assert keys("revoke", key["prefix"], store=store_url).exit_code == 0
    again = keys("revoke", key["prefix"], store=store_url)
    assert again.exit_code == 0
    assert "already revoked" in again.stdout
    unknown = keys("revoke", "deadbeef", store=store_url)
    assert unknown.exit_code == EXIT_BAD_INPUT
    assert unknown.stderr.strip().startswith("error: no API key with prefix 'deadbeef'")
    assert len(unknown.stderr.strip().splitlines()) == 1


def test_spec_checks_the_tenant_and_its_models(store_url: str, spec_file: Path) -> None:
    spec = str(spec_file)
    ok = keys("create", "--tenant", "bob", "-m", "qwen2.5-0.5b", "--spec", spec, store=store_url)
    assert ok.exit_code == 0, ok.output
    no_tenant = keys("create", "--tenant", "bobby", "--spec", spec, store=store_url)
    assert no_tenant.exit_code == EXIT_BAD_INPUT
    assert "no tenant 'bobby'" in no_tenant.stderr
    assert 'did you mean "bob"' in no_tenant.stderr
    no_model = keys("create", "--tenant", "bob", "-m", "qwen", "--spec", spec, store=store_url)
    assert no_model.exit_code == EXIT_BAD_INPUT
    assert "does not serve model 'qwen'" in no_model.stderr
    assert "it serves: qwen2.5-0.5b" in no_model.stderr
    nothing_served = keys("create", "--tenant", "alice", "-m", "x", "--spec", spec, store=store_url)
    assert nothing_served.exit_code == EXIT_BAD_INPUT
    assert "it serves: no models" in nothing_served.stderr
    assert len(active(store_url)) == 1  # refused keys were never created


@pytest.mark.parametrize(
    "args",
    [
        ["--tenant", "bob", "--expires-in", "3x"],
        ["--tenant", "bob", "--expires-in", "0d"],
        ["--tenant", "bob", "--rpm", "0"],
        ["--tenant", "bob", "--concurrency", "-1"],
        ["--tenant", " "],
        ["--name", "no-tenant"],
    ],
    ids=["bad-duration", "zero-duration", "zero-rpm", "negative-concurrency", "blank", "missing"],
)
def test_bad_input_exits_2_and_creates_nothing(store_url: str, args: list[str]) -> None:
    result = keys("create", *args, store=store_url)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert active(store_url) == []


def test_a_missing_spec_file_exits_2(store_url: str, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.yaml")
    result = keys("create", "--tenant", "bob", "--spec", missing, store=store_url)
    assert result.exit_code == EXIT_BAD_INPUT
    assert "cannot read the file" in result.stderr


def test_an_unreachable_store_is_one_line_without_the_password() -> None:
    store = "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/test"
    for args in (["list"], ["create", "--tenant", "bob"], ["revoke", "1a2b3c4d"]):
        result = keys(*args, store=store)
        assert result.exit_code == 1
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
        assert (
            "cannot open the store postgresql+psycopg://postgres:***@127.0.0.1:1" in result.stderr
        )
        assert "hunter2" not in result.output


@pytest.mark.parametrize(
    ("text", "lifetime"),
    [("30d", timedelta(days=30)), ("12h", timedelta(hours=12)), ("90m", timedelta(minutes=90))],
)
def test_parse_duration(text: str, lifetime: timedelta) -> None:
    assert parse_duration(text) == lifetime


def test_without_spec_the_tenant_is_checked_against_the_spec_applied_to_the_store(
    store_url: str,
) -> None:
    unchecked = keys("create", "--tenant", "nobody", store=store_url)
    assert unchecked.exit_code == 0, unchecked.output
    assert "no spec is applied to this store" in unchecked.stderr
    engine = open_store(store_url)
    try:
        SpecRevisions(engine).append(SPEC, "0" * 64, {}, "test", utc_now(), None)
    finally:
        engine.dispose()
    wrong = keys("create", "--tenant", "bobby", store=store_url)
    assert wrong.exit_code == EXIT_BAD_INPUT
    assert "the store's spec (revision 1): no tenant 'bobby'" in wrong.stderr
    assert 'did you mean "bob"' in wrong.stderr
    no_model = keys("create", "--tenant", "bob", "-m", "qwen", store=store_url)
    assert no_model.exit_code == EXIT_BAD_INPUT
    right = keys("create", "--tenant", "bob", "-m", "qwen2.5-0.5b", store=store_url)
    assert right.exit_code == 0, right.output
    assert "not checked" not in right.stderr
    assert [r.key.tenant for r in active(store_url)] == ["nobody", "bob"]
