"""`gpuplex up` refuses to start when the gateway's or the control plane's port is taken: the
process already there would answer the readiness checks (so `up` said all was well while its own
listener had failed to bind) and `--check` would send it a tenant's demo API key."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from gpuplex.errors import HostActionError
from gpuplex.host.ports import port_taken
from gpuplex.settings import UpSettings
from gpuplex.up.lifecycle import StopSignals
from gpuplex.up.run import run_up
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def listener() -> Iterator[int]:
    """A port something already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _spec(tmp_path: Path, gateway_port: int) -> Path:
    spec = yaml.safe_load((ROOT / "examples" / "saas-single-server.yaml").read_text())
    spec.setdefault("gateway", {})["port"] = gateway_port
    path = tmp_path / "gpuplex.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_port_taken_sees_a_listener_and_a_free_port(listener: int) -> None:
    assert port_taken("127.0.0.1", listener)
    assert not port_taken("127.0.0.1", free_port())


@pytest.mark.parametrize("taken", ["gateway", "control plane"])
def test_up_refuses_a_port_in_use_before_starting_anything(
    tmp_path: Path, listener: int, taken: str
) -> None:
    gateway_port = listener if taken == "gateway" else free_port()
    server_port = listener if taken == "control plane" else free_port()
    state_dir = tmp_path / "state"
    settings = UpSettings(
        spec_path=_spec(tmp_path, gateway_port),
        state_dir=state_dir,
        driver="sim",
        server_port=server_port,
    )
    with pytest.raises(HostActionError, match=rf"127\.0\.0\.1:{listener}, where the {taken}"):
        run_up(StopSignals(), settings, Console(file=None, quiet=True))
    assert not state_dir.exists()  # nothing was started, no store or demo credentials made
