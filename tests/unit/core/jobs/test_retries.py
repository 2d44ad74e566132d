"""Retries of a failed job: Kubernetes Jobs' delays by default (10 s, doubling, at most six
minutes), as many as `backoff_limit` allows (none by default), and a job file whose longest wait
is shorter than its first is refused."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpuplex.core.jobs.retries import may_retry, not_before_words, retry_delay_s
from gpuplex.core.spec.jobs import JobSpec


def job(**fields: object) -> JobSpec:
    return JobSpec.model_validate(
        {"tenant": "acme", "gpu": {"count": 1}, "command": ["x"], **fields}
    )


def test_the_default_is_no_retry_and_kubernetes_delays() -> None:
    plain = job()
    assert plain.backoff_limit == 0
    assert not may_retry(plain, 0)
    assert [retry_delay_s(plain, n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 320, 360]
    assert retry_delay_s(plain, 10_000) == 360  # capped, however many


@pytest.mark.parametrize(("failures", "allowed"), [(0, True), (1, True), (2, False), (3, False)])
def test_a_job_is_retried_while_it_has_retries_left(failures: int, allowed: bool) -> None:
    assert may_retry(job(backoff_limit=2), failures) is allowed


def test_its_own_waits() -> None:
    quick = job(backoff_limit=3, backoff_initial_s=1, backoff_max_s=3)
    assert [retry_delay_s(quick, n) for n in (1, 2, 3)] == [1, 2, 3]


@pytest.mark.parametrize(
    "fields",
    [
        {"backoff_limit": -1},
        {"backoff_limit": 101},
        {"backoff_initial_s": 0},
        {"backoff_max_s": 86_401},
        {"backoff_initial_s": 60, "backoff_max_s": 30},
        {"backoff_limit": "2"},
    ],
)
def test_a_bad_retry_setting_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        job(**fields)


def test_when_a_retry_may_start_is_said_in_utc() -> None:
    assert not_before_words(70.0, 62.0) == "00:01:10 UTC, in 8 s"
