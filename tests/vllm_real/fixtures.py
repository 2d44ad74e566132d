"""Session fixtures for a real vLLM, usable from any test folder (tests/conftest.py registers this
module with `pytest_plugins`):

- `vllm_model`: `ModelFiles`, the tiny random-weight Llama and its LoRA adapters `lora-a` and
  `lora-b`, built once in a temporary folder (about 15 s);
- `vllm`: one `VllmServer` serving that model as `tiny-llama` and both adapters by name, started
  once (50-75 s to /health on 2 cores; about 3.5 GiB) and stopped after the last test that asks for
  it (tests/early_stop.py).

Where vLLM is not installed the tests that ask for either skip and say how to install it (`make
vllm`), unless GPUPLEX_REQUIRE_VLLM=1 (CI), where they fail instead. tests/conftest.py puts every test
that asks for either (and all of tests/vllm_real) in the `vllm` group, run on one pytest-xdist
worker, so one session starts one server, and gives those tests a longer timeout (the first one
waits for the build and the start).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests import early_stop
from tests.vllm_real.server import (
    BASE_NAME,
    ModelFiles,
    VllmServer,
    build_model,
    missing,
    start_vllm,
)

#: A tool-call parser, so that vLLM answers forced tool calls (`tool_choice` naming a function) and
#: streams them as `tool_calls` deltas: the differential test and the abuse tests send them.
TOOL_PARSER = ("--enable-auto-tool-choice", "--tool-call-parser", "pythonic")


def vllm_or_skip() -> None:
    """Skip (or fail, under GPUPLEX_REQUIRE_VLLM=1) where vLLM is not installed."""
    why = missing()
    if why is None:
        return
    if os.environ.get("GPUPLEX_REQUIRE_VLLM") == "1":
        pytest.fail(f"{why}, and GPUPLEX_REQUIRE_VLLM=1 makes it mandatory")
    pytest.skip(why)


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> ModelFiles:
    vllm_or_skip()
    return build_model(tmp_path_factory.mktemp("vllm-model"))


@pytest.fixture(scope="session")
def vllm(
    request: pytest.FixtureRequest,
    vllm_model: ModelFiles,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[VllmServer]:
    log_path = tmp_path_factory.mktemp("vllm-server") / "vllm.log"
    server = start_vllm(vllm_model, log_path, served_name=BASE_NAME, extra_args=TOOL_PARSER)
    early_stop.started(request, server.stop)
    try:
        yield server
    finally:
        server.stop()
