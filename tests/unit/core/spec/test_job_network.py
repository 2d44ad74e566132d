"""A job always runs in a network of its own: `network: host` is refused when the file is read,
naming the field and why; `none` (or nothing) is taken."""

from __future__ import annotations

import pytest

from gpuplex.core.spec.jobs import JobSpec, parse_job
from gpuplex.core.spec.runtime import Network


def job(**fields: object) -> dict[str, object]:
    return {"tenant": "contoso", "gpu": {"count": 1}, "command": ["python"], **fields}


@pytest.mark.parametrize("given", [{}, {"network": "none"}])
def test_a_job_runs_in_a_network_of_its_own(given: dict[str, object]) -> None:
    parsed = parse_job(job(**given))
    assert isinstance(parsed, JobSpec)
    assert parsed.network is Network.NONE
    assert parsed.as_workload("job-j1", 30.0).network is Network.NONE


def test_network_host_is_refused_naming_the_field_and_why() -> None:
    problems = parse_job(job(network="host"))
    assert isinstance(problems, list)
    ((path, message),) = [(p.dotted_path, p.message) for p in problems]
    assert path == "network"
    assert "another tenant's model server" in message
    assert "workload of the spec" in message


def test_an_unknown_network_is_refused_too() -> None:
    problems = parse_job(job(network="bridge"))
    assert isinstance(problems, list)
    assert [p.dotted_path for p in problems] == ["network"]
