"""`gpuplex sim ...`: simulated stand-ins for tests, benchmarks and demos.

    gpuplex sim model --port 8001 --model llama-8b --adapter acme/support --decode-ms-per-token 5

Also runs as `python -m gpuplex.cli.sim model ...`."""

from __future__ import annotations

from types import FrameType
from typing import Annotated

import typer

from gpuplex.cli.help_pages import command_group

DEFAULT_MODEL = "sim-model"

sim_app = command_group("Simulated stand-ins for tests, benchmarks and demos.")


@sim_app.callback()
def sim() -> None:
    """Simulated stand-ins for tests, benchmarks and demos."""


@sim_app.command("model")
def model_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8001,
    model: Annotated[
        list[str] | None,
        typer.Option(
            help="A served model name; repeat for more; the first is the base.",
            show_default=DEFAULT_MODEL,
        ),
    ] = None,
    adapter: Annotated[
        list[str] | None, typer.Option(help="A LoRA adapter name on the base; repeat for more.")
    ] = None,
    embedding_model: Annotated[
        list[str] | None,
        typer.Option(
            help=(
                "A served name that only embeds, as a vLLM embedding model; repeat for more. "
                "With one, the other models refuse embeddings (404), as a generative vLLM does."
            ),
            show_default="every model also embeds",
        ),
    ] = None,
    reasoning_model: Annotated[
        list[str] | None,
        typer.Option(
            help=(
                "A served name (model or adapter) whose chat replies reason first "
                "(`reasoning`, as vLLM with a reasoning parser); repeat for more."
            )
        ),
    ] = None,
    prefill_ms_per_token: Annotated[
        float,
        typer.Option(
            min=0.0, help="Prompt processing time per prompt token (time to first token)."
        ),
    ] = 0.0,
    decode_ms_per_token: Annotated[
        float, typer.Option(min=0.0, help="Time per generated token after the first.")
    ] = 0.0,
    contention: Annotated[
        float,
        typer.Option(
            min=0.0, help="Slowdown per extra request in flight: 1 + F * (in_flight - 1)."
        ),
    ] = 0.0,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            min=1, help="Requests run at once (a batch); more wait.", show_default="no limit"
        ),
    ] = None,
    default_max_tokens: Annotated[
        int,
        typer.Option(min=1, help="Tokens a completion request without max_tokens generates."),
    ] = 16,
    max_model_len: Annotated[
        int,
        typer.Option(
            min=1, help="Context length: a chat request without a limit generates up to it."
        ),
    ] = 4096,
    embedding_dim: Annotated[int, typer.Option(min=1, help="Length of embedding vectors.")] = 8,
    gpu_memory_mib: Annotated[
        int,
        typer.Option(
            min=0, help="Simulated GPU memory to hold (reported to the simulated GPU driver)."
        ),
    ] = 0,
) -> None:
    """Serve a simulated OpenAI-compatible model server that answers as vLLM does.

    It counts tokens with a small BPE tokenizer of its own (trained at start, about half a
    second), and serves until SIGINT or SIGTERM, which end the requests in progress at once."""
    from gpuplex.sim.model_server import ModelServerSettings, make_app

    try:
        import uvicorn  # a test and demo tool: the rest of the CLI does not need it
    except ImportError:
        typer.echo(
            "error: the simulated model server needs uvicorn: pip install 'uvicorn[standard]'",
            err=True,
        )
        raise typer.Exit(1) from None

    settings = ModelServerSettings(
        models=tuple(model or [DEFAULT_MODEL]),
        adapters=tuple(adapter or []),
        embedding_models=tuple(embedding_model or []),
        reasoning_models=tuple(reasoning_model or []),
        prefill_s_per_token=prefill_ms_per_token / 1000,
        decode_s_per_token=decode_ms_per_token / 1000,
        contention=contention,
        max_concurrency=max_concurrency,
        default_max_tokens=default_max_tokens,
        max_model_len=max_model_len,
        embedding_dim=embedding_dim,
    )
    served = ", ".join(settings.models + settings.embedding_models + settings.adapters)
    typer.echo(f"simulated model server on http://{host}:{port} serving {served}", err=True)
    app = make_app(settings)
    if gpu_memory_mib:
        from gpuplex.sim.workload import SimulatedGpuMemory

        memory = SimulatedGpuMemory()
        memory.hold(gpu_memory_mib)
        memory.report_busy(app.busy_seconds)  # busy while it serves requests
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        ws="none",
        lifespan="on",
        log_level="warning",
        access_log=False,
        timeout_keep_alive=75,  # longer than clients' pools keep idle connections
        timeout_graceful_shutdown=3,  # a backstop: app.stop() ends open streams at once
        backlog=2048,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            app.stop()
            super().handle_exit(sig, frame)

    Server(config).run()


if __name__ == "__main__":
    sim_app()
