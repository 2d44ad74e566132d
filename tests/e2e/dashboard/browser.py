"""Debian's chromium driven by Playwright (never a downloaded browser). Where it is missing the
test skips and says why, unless GPUPLEX_REQUIRE_CHROMIUM=1 (CI), where it fails instead."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: No internet here: background networking, component updates and sync would only log errors.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_or_skip() -> Path:
    found = CHROMIUM if CHROMIUM.is_file() else None
    if found is None:
        which = shutil.which("chromium")
        found = Path(which) if which else None
    if found is not None:
        return found
    message = f"no chromium at {CHROMIUM} (apt-get install -y chromium)"
    if os.environ.get("GPUPLEX_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{message}, and GPUPLEX_REQUIRE_CHROMIUM=1 makes it mandatory")
    pytest.skip(message)
