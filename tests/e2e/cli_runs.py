"""Run the `gpuplex` command: as a real subprocess (`python -m gpuplex.cli`), or in this process through
the same `run()` entry point (fast, for large tables of inputs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from gpuplex.cli.main import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True, slots=True)
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_subprocess(
    *args: str | Path, timeout_s: float = 60, hash_seed: int | None = None
) -> CliResult:
    """The CLI in a fresh interpreter, exactly as a user runs it. `hash_seed` fixes
    PYTHONHASHSEED (set and dict-of-str order) for that interpreter."""
    env = dict(os.environ)
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = str(hash_seed)
    completed = subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "gpuplex.cli", *(str(arg) for arg in args)],
        capture_output=True,
        timeout=timeout_s,
        check=False,
        cwd=ROOT,
        env=env,
    )
    return CliResult(
        completed.returncode,
        _ANSI.sub("", completed.stdout.decode("utf-8", errors="replace")),
        _ANSI.sub("", completed.stderr.decode("utf-8", errors="replace")),
    )


def run_in_process(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CliResult:
    """The CLI's `run()` in this process. An exception other than SystemExit escapes and fails the
    test with its traceback, which is the in-process form of "the user saw a traceback"."""
    monkeypatch.setattr(sys, "argv", ["gpuplex", *args])
    _consoles_read_columns(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        run()
    captured = capsys.readouterr()
    code = exited.value.code
    exit_code = 0 if code is None else code if isinstance(code, int) else 1
    return CliResult(exit_code, _ANSI.sub("", captured.out), _ANSI.sub("", captured.err))


def _consoles_read_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CLI module's consoles read $COLUMNS once, when the module is imported: in this process
    that may have been before the test set it (another test imported the module first). Give them
    the test's width now, as a fresh `gpuplex` process would have; undone after the test."""
    columns = os.environ.get("COLUMNS", "")
    if not columns.isdigit():
        return
    for name, module in list(sys.modules.items()):
        if name == "gpuplex.cli" or name.startswith("gpuplex.cli."):
            for value in list(vars(module).values()):
                if isinstance(value, Console):
                    monkeypatch.setattr(value, "_width", int(columns))
