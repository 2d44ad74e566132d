"""Retrying: which errors a retry can help, and a background pass that logs a failure by its kind
and never lets it out (the thread that runs the job must not die)."""

from __future__ import annotations

import logging

import pytest

from gpuplex.errors import LimiterUnavailable, SpecError, SpecProblem, StoreError, StoreValueRefused
from gpuplex.retry import is_retryable, run_pass

log = logging.getLogger("tests.retry")


def test_only_a_gpuplex_error_whose_code_says_so_is_retryable() -> None:
    assert is_retryable(StoreError("store down"))
    assert is_retryable(LimiterUnavailable("redis down"))
    assert not is_retryable(StoreValueRefused("a NUL character"))  # the same value fails again
    assert not is_retryable(SpecError("s.yaml", [SpecProblem(("tenants",), "empty")]))
    assert not is_retryable(ConnectionError("not classified: a bug to fix, not to retry"))


def fails_with(error: Exception) -> int:
    raise error


def test_a_pass_returns_what_its_step_returned() -> None:
    assert run_pass(lambda: 6, job="scrape", retry_in_s=15, log=log) == 6


def test_a_retryable_failure_is_one_warning_line_with_its_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=log.name):
        got = run_pass(
            lambda: fails_with(StoreError("store x is down")), job="roll-up", retry_in_s=60, log=log
        )
    assert got is None
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert record.getMessage() == "roll-up failed; retrying in 60 s: store x is down"


def test_a_final_gpuplex_failure_is_an_error_with_its_code_and_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=log.name):
        run_pass(
            lambda: fails_with(StoreValueRefused("remove NUL")), job="move", retry_in_s=1, log=log
        )
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is None
    assert (
        record.getMessage() == "move failed (store_value_refused); trying again in 1 s: remove NUL"
    )


def test_a_bug_is_an_error_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=log.name):
        got = run_pass(lambda: fails_with(KeyError("x")), job="scrape", retry_in_s=15, log=log)
    assert got is None
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None


def test_an_interrupt_is_not_swallowed() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_pass(interrupted, job="scrape", retry_in_s=15, log=log)
