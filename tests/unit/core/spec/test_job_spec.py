"""A job file's bounds (`gpuplex.core.spec.jobs`): a tenant writes it, so its env, command and
image are bounded, and it cannot name the variables that confine a process to its GPU share.
Each bound is tested at the limit (taken) and one past it (refused, naming the field)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.spec.jobs import (
    MAX_ARGUMENT_CHARS,
    MAX_COMMAND_ARGUMENTS,
    MAX_ENV_NAME_CHARS,
    MAX_ENV_TOTAL_CHARS,
    MAX_ENV_VALUE_CHARS,
    MAX_ENV_VARIABLES,
    MAX_IMAGE_CHARS,
    JobSpec,
    parse_job,
    reserved_env_name,
)


def job(**fields: Any) -> dict[str, Any]:
    return {"tenant": "contoso", "gpu": {"count": 1}, "command": ["python"], **fields}


def problems_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    parsed = parse_job(data)
    assert isinstance(parsed, list), "expected problems, got a job"
    return [(problem.dotted_path, problem.message) for problem in parsed]


AT_THE_LIMIT = {
    "env entries": job(env={f"V{n}": "" for n in range(MAX_ENV_VARIABLES)}),
    "env name": job(env={"V" * MAX_ENV_NAME_CHARS: "x"}),
    "env value": job(env={"V": "x" * MAX_ENV_VALUE_CHARS}),
    "env in all": job(env={"A": "x" * (MAX_ENV_TOTAL_CHARS // 2 - 1), "B": "y" * 30_000}),
    "arguments": job(command=["x"] * MAX_COMMAND_ARGUMENTS),
    "argument": job(command=["x" * MAX_ARGUMENT_CHARS]),
    "image": job(command=None, image="r/" + "a" * (MAX_IMAGE_CHARS - 2)),
    "common CUDA variables": job(env={"CUDA_LAUNCH_BLOCKING": "1", "CUDA_MODULE_LOADING": "LAZY"}),
}


@pytest.mark.parametrize("case", list(AT_THE_LIMIT))
def test_a_job_at_each_limit_is_taken(case: str) -> None:
    assert isinstance(parse_job(AT_THE_LIMIT[case]), JobSpec)


PAST_THE_LIMIT = {
    "env entries": (job(env={f"V{n}": "" for n in range(MAX_ENV_VARIABLES + 1)}), "env", "128"),
    "env name": (job(env={"V" * (MAX_ENV_NAME_CHARS + 1): "x"}), "env", "not a variable name"),
    "env value": (job(env={"V": "x" * (MAX_ENV_VALUE_CHARS + 1)}), "env", "at most 32768"),
    "env in all": (
        job(env={"A": "x" * (MAX_ENV_TOTAL_CHARS // 2), "B": "y" * (MAX_ENV_TOTAL_CHARS // 2)}),
        "env",
        "in all",
    ),
    "env name with =": (job(env={"A=B": "x"}), "env", "not a variable name"),
    "env name starting with a digit": (job(env={"1A": "x"}), "env", "not a variable name"),
    "NUL in an env value": (job(env={"A": "\x00"}), "env", "NUL"),
    "reserved": (job(env={"CUDA_VISIBLE_DEVICES": "0"}), "env", "confine"),
    "arguments": (job(command=["x"] * (MAX_COMMAND_ARGUMENTS + 1)), "command", "1024"),
    "argument": (job(command=["x" * (MAX_ARGUMENT_CHARS + 1)]), "command", "argument 0"),
    "command in all": (job(command=["x" * MAX_ARGUMENT_CHARS] * 5), "command", "in all"),
    "NUL in an argument": (job(command=["x", "\x00"]), "command", "argument 1"),
    "image": (job(command=None, image="a" * (MAX_IMAGE_CHARS + 1)), "image", "512"),
    "image with a newline": (job(command=None, image="a\nb"), "image", "one word"),
    "empty image": (job(command=None, image=""), "image", "one word"),
}


@pytest.mark.parametrize("case", list(PAST_THE_LIMIT))
def test_a_job_past_a_limit_is_refused_naming_the_field(case: str) -> None:
    data, field, words = PAST_THE_LIMIT[case]
    [(path, message)] = problems_of(data)
    assert path == field
    assert words in message, message
    assert len(message) < 400  # an oversized input is not echoed back


@pytest.mark.parametrize(
    ("name", "reserved"),
    [
        ("CUDA_VISIBLE_DEVICES", True),
        ("cuda_visible_devices", True),
        ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", True),
        ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", True),
        ("CUDA_MPS_PIPE_DIRECTORY", True),
        ("NVIDIA_VISIBLE_DEVICES", True),
        ("NVIDIA_DRIVER_CAPABILITIES", True),
        ("GPUPLEX_TENANT", True),
        ("CUDA_VISIBLE_DEVICES_X", False),
        ("CUDA_LAUNCH_BLOCKING", False),
        ("NVIDIA", False),
        ("MY_NVIDIA_HOME", False),
        ("SEED", False),
    ],
)
def test_reserved_names_are_the_gpu_confinement_ones(name: str, reserved: bool) -> None:
    assert reserved_env_name(name) is reserved
