"""The metrics token: only its hash is kept, a short one is refused with what to do, the header is
parsed strictly, and `gpuplex server` takes it from $GPUPLEX_METRICS_TOKEN without leaving it in
its environment; nothing reads /metrics without a token unless the operator lists a network."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpuplex.cli import gateway as gateway_cli
from gpuplex.cli.server import server_command
from gpuplex.errors import GatewayError
from gpuplex.gateway import serve as gateway_serve
from gpuplex.observe.metrics_token import (
    MIN_CHARS,
    metrics_token_sha256,
    new_metrics_token,
    presents_metrics_token,
)
from gpuplex.settings import METRICS_TOKEN_VARIABLE, GatewaySettings, ServerSettings

ROOT = Path(__file__).resolve().parents[3]

TOKEN = "gpm_0123456789abcdef-token"  # noqa: S105 - a test's own token


def test_only_the_sha256_is_kept() -> None:
    assert metrics_token_sha256(TOKEN) == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert metrics_token_sha256(f"  {TOKEN}\n") == metrics_token_sha256(TOKEN)  # a file's newline


@pytest.mark.parametrize("token", ["", "secret", "x" * (MIN_CHARS - 1), " " * 40])
def test_a_short_token_is_refused_saying_how_to_make_one(token: str) -> None:
    with pytest.raises(ValueError, match=f"at least {MIN_CHARS}.*openssl rand -hex 32"):
        metrics_token_sha256(token)


def test_new_tokens_are_long_random_and_accepted() -> None:
    first, second = new_metrics_token(), new_metrics_token()
    assert first != second
    assert first.startswith("gpm_")
    assert len(first) >= 40
    assert presents_metrics_token(f"Bearer {first}", metrics_token_sha256(first))


def test_presents_the_token_only_when_one_is_configured_and_it_matches() -> None:
    sha256 = metrics_token_sha256(TOKEN)
    assert presents_metrics_token(f"Bearer {TOKEN}", sha256)
    assert not presents_metrics_token(f"Bearer {TOKEN}", None)
    assert not presents_metrics_token(f"Bearer {TOKEN}0", sha256)
    assert not presents_metrics_token(f"Bearer {sha256}", sha256)  # the hash is not the token


def started_server(*args: str) -> tuple[int, str, list[ServerSettings]]:
    """`gpuplex server ARGS` up to the point where it would start serving."""
    started: list[ServerSettings] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("gpuplex.server.run.run_server", started.append)
        app = typer.Typer()
        app.command("server")(server_command)
        app.command("version")(lambda: None)  # a second command keeps `server` a subcommand
        result = CliRunner().invoke(app, ["server", "--store", "sqlite:///unused.db", *args])
    return result.exit_code, " ".join(result.output.replace("│", " ").split()), started


def test_the_server_takes_the_token_from_the_environment_and_keeps_its_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(METRICS_TOKEN_VARIABLE, TOKEN)
    code, output, started = started_server()
    assert code == 0, output
    assert started[0].metrics_token_sha256 == metrics_token_sha256(TOKEN)
    assert started[0].metrics_from == ()  # no network reads it without a token
    assert METRICS_TOKEN_VARIABLE not in os.environ  # nothing started later inherits it
    assert TOKEN not in repr(started[0])


def test_the_server_without_a_token_serves_metrics_only_to_tokens_it_knows() -> None:
    code, _, started = started_server("--metrics-from", "10.0.0.0/8")
    assert code == 0
    assert started[0].metrics_token_sha256 is None
    assert started[0].metrics_from == ("10.0.0.0/8",)


def test_the_server_refuses_a_short_token_before_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(METRICS_TOKEN_VARIABLE, "hunter2")
    code, output, started = started_server()
    assert (code, started) == (2, [])
    assert METRICS_TOKEN_VARIABLE in output
    assert "hunter2" not in output


def started_gateway(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[BaseException | None, str, list[GatewaySettings]]:
    """`gpuplex gateway` (as a non-root user) up to the point where it would start its workers."""
    started: list[GatewaySettings] = []
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    # the command imports serve when it runs (the CLI starts without the gateway's modules)
    monkeypatch.setattr(gateway_serve, "serve", lambda settings, *_: started.append(settings))
    app = typer.Typer()
    app.command("gateway")(gateway_cli.gateway_command)
    app.command("version")(lambda: None)
    args = ["gateway", "--config", str(ROOT / "examples" / "saas-single-server.yaml")]
    args += ["--store", f"sqlite:///{tmp_path / 'store.db'}", "--spool-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    return result.exception, " ".join(result.output.split()), started


def test_the_gateway_hands_its_workers_the_hash_never_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(METRICS_TOKEN_VARIABLE, TOKEN)
    raised, output, started = started_gateway(monkeypatch, tmp_path)
    assert raised is None, output
    assert started[0].metrics_token_sha256 == metrics_token_sha256(TOKEN)
    assert TOKEN not in str(started[0].to_environment())  # what the workers are given
    assert METRICS_TOKEN_VARIABLE not in os.environ  # nor do they inherit the variable
    assert "answers nobody" not in output


def test_the_gateway_says_when_nobody_can_read_metrics(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    raised, output, started = started_gateway(monkeypatch, tmp_path)
    assert raised is None, output
    assert started[0].metrics_token_sha256 is None
    assert f"/metrics answers nobody: set {METRICS_TOKEN_VARIABLE}" in output


def test_the_gateway_refuses_a_short_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(METRICS_TOKEN_VARIABLE, "hunter2")
    raised, _, started = started_gateway(monkeypatch, tmp_path)
    assert started == []
    assert isinstance(raised, GatewayError)  # `gpuplex` prints its message and exits 2
    assert raised.message.startswith(f"{METRICS_TOKEN_VARIABLE}: the metrics token has 7 ")
    assert "hunter2" not in raised.message
