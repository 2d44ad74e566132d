"""`gpuplex bench isolation`: measure the isolation patterns on this host's GPU.

    gpuplex bench isolation --out bench-isolation        # on a GPU server (NVML, PyTorch)
    gpuplex bench isolation --driver sim --seconds 2     # the harness on simulated GPUs, CPU loops

Each scenario is applied through the host runtime and stopped with `down` (MPS daemons included).
A progress bar while it runs; then three tables (per tenant, aggregate against exclusive, a steady
tenant's p99 beside a heavy neighbour), also written to --out as results.json and results.md."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuplex.cli.conventions import reported
from gpuplex.cli.help_pages import command_group
from gpuplex.consoles import stderr_console, stdout_console

if TYPE_CHECKING:
    from gpuplex.isolation_bench.results import ScenarioResult

out = stdout_console()
err = stderr_console()

bench_app = command_group("Measure gpuplex on this host.")


class BenchDriver(StrEnum):
    NVML = "nvml"
    SIM = "sim"


class BenchBackend(StrEnum):
    AUTO = "auto"
    TORCH = "torch"
    NUMPY = "numpy"


@bench_app.callback()
def bench() -> None:
    """Measure gpuplex on this host."""


@bench_app.command(name="isolation")
def isolation_command(
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Where specs and results go [default: a new folder under /tmp].",
            show_default=False,
        ),
    ] = None,
    driver: Annotated[
        BenchDriver, typer.Option(help="nvml: this host's GPU; sim: test the harness.")
    ] = BenchDriver.NVML,
    backend: Annotated[
        BenchBackend,
        typer.Option(help="The loop: torch on the GPU, numpy on the CPU; auto by driver."),
    ] = BenchBackend.AUTO,
    batch: Annotated[
        list[int] | None, typer.Option(help="A batch size; repeat for more (default: 1 and 32).")
    ] = None,
    copies: Annotated[int, typer.Option(min=2, help="Tenants sharing the GPU.")] = 2,
    heavy_batch: Annotated[int, typer.Option(min=1, help="The heavy neighbour's batch.")] = 256,
    seconds: Annotated[float, typer.Option(min=0.5, help="Measured window per scenario.")] = 15.0,
    width: Annotated[
        int | None, typer.Option(min=8, help="Layer width (default: 4096; 256 on numpy).")
    ] = None,
    layers: Annotated[int, typer.Option(min=1, help="Layers in the chain.")] = 8,
    memory_gib: Annotated[float, typer.Option(min=1, help="Each shared tenant's GPU memory.")] = 8,
    startup_s: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="How long each tenant may take to start and warm up; all start measuring together "
            "once every one is ready (default: 300 on torch, 60 on numpy).",
        ),
    ] = None,
) -> None:
    """Measure how isolation modes share a GPU: throughput, latency and interference.

    Runs N copies of a GPU loop under exclusive use, time-slicing, MPS with equal and with 30/70
    thread shares, and a steady tenant beside a heavy one; reports throughput, p50/p99 latency,
    aggregate against exclusive, and interference."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpuplex.host.interpreter import python_for_others
    from gpuplex.isolation_bench.report import json_records, markdown_report
    from gpuplex.isolation_bench.run import BenchSettings, run_all
    from gpuplex.isolation_bench.scenarios import LoopProgram, scenarios

    if batch is not None and min(batch) < 1:
        raise typer.BadParameter(
            f"{min(batch)} is not a batch size: use 1 or more", param_hint="--batch"
        )
    with reported():
        if driver is BenchDriver.NVML:
            _require_gpu()  # before anything is made: without a GPU, say so and how to go on
        if out_dir is None:
            out_dir = Path(tempfile.mkdtemp(prefix="gpuplex-bench-isolation-"))
            out_dir.chmod(0o711)  # the tenants' users pass through it to their folders
        chosen = backend.value
        if backend is BenchBackend.AUTO:
            chosen = "torch" if driver is BenchDriver.NVML else "numpy"
        torch = chosen == "torch"
        python, python_env = python_for_others() if os.geteuid() == 0 else (sys.executable, {})
        program = LoopProgram(
            python=python,
            env=python_env,
            backend=chosen,
            width=width or (4096 if torch else 256),
            layers=layers,
            seconds=seconds,
            memory_gib=memory_gib,
        )
        plan = scenarios(batch or [1, 32], copies, heavy_batch)
        settings = BenchSettings(
            work_dir=out_dir.absolute(),
            driver=driver.value,
            program=program,
            startup_s=startup_s if startup_s is not None else (300.0 if torch else 60.0),
        )
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err
        )
        with progress:
            task = progress.add_task(f"{len(plan)} scenarios", total=len(plan))

            def done(result: ScenarioResult) -> None:
                progress.update(task, advance=1, description=f"done: {result.scenario.name}")

            results = run_all(plan, settings, done)
        _print_tables(results)
        (settings.work_dir / "results.json").write_text(
            json.dumps(json_records(results), indent=1), encoding="utf-8"
        )
        (settings.work_dir / "results.md").write_text(
            markdown_report(results, program), encoding="utf-8"
        )
        out.print(f"results: {settings.work_dir / 'results.md'}, results.json")


def _require_gpu() -> None:
    """Raises GpuDriverError (which says to use --driver sim) where NVML finds no GPU."""
    from gpuplex.host.nvml_driver import NvmlDriver  # loads NVML only for this check

    NvmlDriver().close()


def _print_tables(results: list[ScenarioResult]) -> None:
    from rich.table import Table

    from gpuplex.isolation_bench.report import tables

    for title, header, body in tables(results):
        table = Table(title=title)
        for name in header:
            table.add_column(name, justify="left" if name in ("scenario", "tenant") else "right")
        for line in body:
            table.add_row(*line)
        out.print(table)
