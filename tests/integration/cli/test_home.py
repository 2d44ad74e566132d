"""One home per instance: every command finds the store and the host state through GPUPLEX_HOME
(HOME/store/gpuplex.db, HOME/host) as `gpuplex up` lays them out, and the commands that only
read create nothing, anywhere, when nothing has run there yet."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpuplex.cli.main import app
from gpuplex.settings import GpuplexHome, default_state_dir, default_store_url, gpuplex_home
from gpuplex.up.banner import UpBanner, print_banner

ROOT = Path(__file__).resolve().parents[3]
SPEC = ROOT / "examples" / "saas-single-server.yaml"
STORE_MISSING_EXIT = 1

#: Commands that only read: run against an empty home, each must leave every folder as it was.
READ_ONLY = [
    ["validate", str(SPEC)],
    ["plan", str(SPEC)],
    ["plan", str(SPEC), "-o", "json"],
    ["explain", str(SPEC), "chat"],
    ["catalog"],
    ["catalog", "H100-80GB"],
    ["schema"],
    ["kube", "render", str(SPEC)],
    ["host", "status"],
    ["host", "status", "-o", "json"],
    ["host", "check-catalog", "--driver", "sim"],
    ["host", "apply", str(SPEC), "--dry-run", "--driver", "sim"],
    ["keys", "list"],
    ["keys", "revoke", "abcd1234"],
    ["token", "list"],
    ["token", "revoke", "abcd1234"],
    ["audit", "verify"],
    ["audit", "list"],
    ["store", "current"],
]


def _tree(*roots: Path) -> list[str]:
    return sorted(str(path) for root in roots for path in root.rglob("*"))


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An empty home, an empty user home and an empty working directory."""
    found = {name: tmp_path / name for name in ("home", "user", "cwd")}
    for path in found.values():
        path.mkdir()
    monkeypatch.chdir(found["cwd"])
    monkeypatch.setenv("GPUPLEX_HOME", str(found["home"]))
    monkeypatch.setenv("HOME", str(found["user"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(found["user"] / "state"))
    monkeypatch.delenv("GPUPLEX_STORE_URL", raising=False)
    return found


@pytest.mark.parametrize("args", READ_ONLY, ids=" ".join)
def test_a_read_only_command_creates_nothing(args: list[str], places: dict[str, Path]) -> None:
    done = CliRunner().invoke(app, args)
    assert _tree(*places.values()) == []
    if args[0] in ("keys", "token", "audit", "store"):
        assert done.exit_code == STORE_MISSING_EXIT
        message = " ".join((done.output + done.stderr).split())  # as wrapped on the console
        assert f"no store at {places['home'] / 'store' / 'gpuplex.db'}" in message, message
        assert "GPUPLEX_HOME" in message


def test_the_store_and_host_state_are_the_homes(places: dict[str, Path]) -> None:
    home = places["home"]
    assert gpuplex_home() == GpuplexHome(home)
    assert default_store_url() == f"sqlite:///{home / 'store' / 'gpuplex.db'}"
    assert gpuplex_home().host_dir == home / "host"


def test_an_explicit_state_dir_wins_and_store_url_wins_over_the_home(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert gpuplex_home(Path("elsewhere")).root == places["cwd"] / "elsewhere"
    monkeypatch.setenv("GPUPLEX_STORE_URL", "postgresql+psycopg://gpuplex@db/gpuplex")
    assert default_store_url() == "postgresql+psycopg://gpuplex@db/gpuplex"
    monkeypatch.delenv("GPUPLEX_HOME")
    assert gpuplex_home().root == default_state_dir()


def test_a_token_made_without_store_goes_where_up_keeps_its_store(
    places: dict[str, Path],
) -> None:
    created = CliRunner().invoke(app, ["token", "create", "--name", "ops"])
    assert created.exit_code == 0, created.output
    assert (places["home"] / "store" / "gpuplex.db").is_file()
    listed = CliRunner().invoke(app, ["token", "list"])
    assert listed.exit_code == 0, listed.output
    assert "ops" in listed.output


def test_ups_banner_prints_the_line_that_points_the_cli_at_it(tmp_path: Path) -> None:
    home = tmp_path / "demo up"
    buffer = io.StringIO()
    banner = UpBanner(
        how="1 simulated GPU",
        server_url="http://127.0.0.1:8090",
        gateway_url="http://127.0.0.1:8080",
        admin_token="gpx_admin",  # noqa: S106 - a made-up token for the page
        viewer_tenant=None,
        viewer_token=None,
        keys=[],
        home=home,
    )
    print_banner(Console(file=buffer, width=80), banner)
    assert f"export GPUPLEX_HOME='{home}'" in buffer.getvalue()
