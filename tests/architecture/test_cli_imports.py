"""Every `gpuplex` command starts by importing the CLI; the libraries only some commands need (the
store, the gateway's HTTP stack, Redis) are imported by those commands, so `validate` or `plan`
does not pay for them (importing them doubled the CLI's start-up time)."""

from __future__ import annotations

import subprocess
import sys

LOADED_ONLY_WHEN_USED = (
    "sqlalchemy",
    "aiohttp",
    "uvicorn",
    "redis",
    "psycopg",
    "prometheus_client",
)


def test_importing_the_cli_loads_no_store_or_server_library() -> None:
    probe = (
        "import sys, gpuplex.cli.main\n"
        f"print(','.join(m for m in {LOADED_ONLY_WHEN_USED!r} if m in sys.modules))\n"
    )
    done = subprocess.run(  # noqa: S603 - this interpreter, a script written above
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ""
